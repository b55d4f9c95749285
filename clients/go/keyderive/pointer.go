package keyderive

import (
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

var (
	// After "~", RFC 6901 allows only "0" (for "~") and "1" (for "/").
	badTilde   = regexp.MustCompile(`~([^01]|$)`)
	arrayIndex = regexp.MustCompile(`^(?:0|[1-9][0-9]*)$`)
)

// parsePointer splits an RFC 6901 pointer into its unescaped tokens. The empty
// pointer (the whole document) is refused: a key over every member would change
// with each volatile one.
func parsePointer(pointer string) ([]string, *Error) {
	meta := map[string]string{"pointer": pointer}
	switch {
	case pointer == "":
		return nil, newError(ReasonInvalidJSONPointer, `JSON pointer "" names the whole arguments document; a key field must name a member`, meta)
	case !strings.HasPrefix(pointer, "/"):
		return nil, newError(ReasonInvalidJSONPointer, "JSON pointer "+strconv.Quote(pointer)+` must start with "/" (RFC 6901)`, meta)
	case badTilde.MatchString(pointer):
		return nil, newError(ReasonInvalidJSONPointer, "JSON pointer "+strconv.Quote(pointer)+` has a "~" not followed by "0" or "1"`, meta)
	case !utf8.ValidString(pointer):
		return nil, newError(ReasonInvalidJSONPointer, "JSON pointer is not well-formed Unicode", meta)
	}
	tokens := strings.Split(pointer[1:], "/")
	for i, t := range tokens {
		// "~1" before "~0", so "~01" is "~1", not "/" (RFC 6901 §4).
		tokens[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
	}
	return tokens, nil
}

// resolve finds the value tokens name, or nil. An array token is a decimal
// index without leading zeros; "-" (past the end) names nothing.
func resolve(n *node, tokens []string) *node {
	for _, t := range tokens {
		switch n.kind {
		case kindObject:
			var next *node
			for _, m := range n.members {
				if m.name == t {
					next = m.value
					break
				}
			}
			if next == nil {
				return nil
			}
			n = next
		case kindArray:
			if !arrayIndex.MatchString(t) {
				return nil
			}
			i, err := strconv.Atoi(t)
			if err != nil || i >= len(n.elems) {
				return nil
			}
			n = n.elems[i]
		default:
			return nil
		}
	}
	return n
}

// firstUnsafeInteger is the pointer (from at) of the first integer beyond
// ±(2^53-1) at or under n, or "".
func firstUnsafeInteger(n *node, at string) string {
	switch {
	case n.unsafeInt:
		return at
	case n.kind == kindObject:
		for _, m := range n.members {
			if p := firstUnsafeInteger(m.value, at+"/"+escapeToken(m.name)); p != "" {
				return p
			}
		}
	case n.kind == kindArray:
		for i, e := range n.elems {
			if p := firstUnsafeInteger(e, at+"/"+strconv.Itoa(i)); p != "" {
				return p
			}
		}
	}
	return ""
}

func escapeToken(t string) string {
	return strings.ReplaceAll(strings.ReplaceAll(t, "~", "~0"), "/", "~1")
}
