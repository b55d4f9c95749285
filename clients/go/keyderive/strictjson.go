package keyderive

import (
	"math"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// kind is a JSON value's type.
type kind uint8

const (
	kindObject kind = iota
	kindArray
	kindString
	kindNumber
	kindLiteral // true, false
	kindNull
)

// node is one parsed value. Its raw text (text[start:end]) is what enters the
// canonical document: JCS re-reads it, so escapes and number spellings are
// normalised there, once, by the library.
type node struct {
	kind       kind
	start, end int
	members    []member // objects, in text order; names unique
	elems      []*node  // arrays
	// unsafeInt: a number written as an integer beyond ±(2^53-1). It was (or
	// would be) rounded by a double, so it cannot identify anything in a key.
	unsafeInt bool
}

type member struct {
	name  string
	value *node
}

// maxSafeInteger is ECMAScript's Number.MAX_SAFE_INTEGER.
const maxSafeInteger = 1<<53 - 1

// parser is one left-to-right pass over well-formed UTF-8; the first problem
// met in the text answers (ADR 0002, "which reason wins", step 3).
type parser struct {
	text     []byte
	i        int
	maxDepth int
}

func parseStrict(text []byte, maxDepth int) (*node, *Error) {
	p := &parser{text: text, maxDepth: maxDepth}
	p.skipWS()
	n, err := p.value(0)
	if err != nil {
		return nil, err
	}
	p.skipWS()
	if p.i != len(p.text) {
		return nil, p.notJSON("unexpected text after the JSON value")
	}
	return n, nil
}

// skipWS skips RFC 8259 whitespace only: no BOM, no U+00A0, no comments.
func (p *parser) skipWS() {
	for p.i < len(p.text) {
		switch p.text[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *parser) notJSON(what string) *Error {
	return newError(ReasonArgumentsNotJSON, "arguments are not JSON: "+what+" at byte "+strconv.Itoa(p.i), nil)
}

func (p *parser) value(depth int) (*node, *Error) {
	if p.i >= len(p.text) {
		return nil, p.notJSON("unexpected end of text")
	}
	switch c := p.text[p.i]; {
	case c == '{' || c == '[':
		if depth+1 > p.maxDepth {
			return nil, newError(ReasonArgumentsTooDeep, "arguments nest deeper than "+strconv.Itoa(p.maxDepth)+" levels", nil)
		}
		if c == '{' {
			return p.object(depth + 1)
		}
		return p.array(depth + 1)
	case c == '"':
		start := p.i
		if _, err := p.str(); err != nil {
			return nil, err
		}
		return &node{kind: kindString, start: start, end: p.i}, nil
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	default:
		for _, lit := range []string{"true", "false", "null"} {
			if len(p.text)-p.i >= len(lit) && string(p.text[p.i:p.i+len(lit)]) == lit {
				n := &node{kind: kindLiteral, start: p.i, end: p.i + len(lit)}
				if lit == "null" {
					n.kind = kindNull
				}
				p.i += len(lit)
				return n, nil
			}
		}
		return nil, p.notJSON("unexpected character")
	}
}

func (p *parser) object(depth int) (*node, *Error) {
	n := &node{kind: kindObject, start: p.i}
	p.i++ // {
	p.skipWS()
	if p.i < len(p.text) && p.text[p.i] == '}' {
		p.i++
		n.end = p.i
		return n, nil
	}
	seen := map[string]bool{}
	for {
		if p.i >= len(p.text) || p.text[p.i] != '"' {
			return nil, p.notJSON("expected a member name")
		}
		name, err := p.str()
		if err != nil {
			return nil, err
		}
		// Compared after decoding escapes: "\u006frder_id" is "order_id".
		if seen[name] {
			return nil, newError(ReasonArgumentsDuplicateMember, "arguments name the member "+strconv.Quote(name)+" twice in one object", nil)
		}
		seen[name] = true
		p.skipWS()
		if p.i >= len(p.text) || p.text[p.i] != ':' {
			return nil, p.notJSON("expected ':'")
		}
		p.i++
		p.skipWS()
		v, err := p.value(depth)
		if err != nil {
			return nil, err
		}
		n.members = append(n.members, member{name, v})
		p.skipWS()
		if p.i < len(p.text) && p.text[p.i] == ',' {
			p.i++
			p.skipWS()
			continue
		}
		if p.i < len(p.text) && p.text[p.i] == '}' {
			p.i++
			n.end = p.i
			return n, nil
		}
		return nil, p.notJSON("expected ',' or '}'")
	}
}

func (p *parser) array(depth int) (*node, *Error) {
	n := &node{kind: kindArray, start: p.i}
	p.i++ // [
	p.skipWS()
	if p.i < len(p.text) && p.text[p.i] == ']' {
		p.i++
		n.end = p.i
		return n, nil
	}
	for {
		v, err := p.value(depth)
		if err != nil {
			return nil, err
		}
		n.elems = append(n.elems, v)
		p.skipWS()
		if p.i < len(p.text) && p.text[p.i] == ',' {
			p.i++
			p.skipWS()
			continue
		}
		if p.i < len(p.text) && p.text[p.i] == ']' {
			p.i++
			n.end = p.i
			return n, nil
		}
		return nil, p.notJSON("expected ',' or ']'")
	}
}

// str reads a string from its opening quote and returns it decoded. A lone
// surrogate (escaped: raw ones are ill-formed UTF-8, refused earlier) is
// reported when the string closes, so a grammar error before the close wins.
func (p *parser) str() (string, *Error) {
	p.i++ // "
	var out []byte
	lone := false
	for {
		if p.i >= len(p.text) {
			return "", p.notJSON("unterminated string")
		}
		c := p.text[p.i]
		switch {
		case c == '"':
			p.i++
			if lone {
				return "", newError(ReasonArgumentsInvalidUnicode, "arguments hold a lone surrogate in a string or member name", nil)
			}
			return string(out), nil
		case c < 0x20:
			return "", p.notJSON("raw control character in a string")
		case c != '\\':
			out = append(out, c)
			p.i++
			continue
		}
		if p.i+1 >= len(p.text) {
			return "", p.notJSON("unterminated escape")
		}
		esc := p.text[p.i+1]
		p.i += 2
		if simple, ok := simpleEscapes[esc]; ok {
			out = append(out, simple)
			continue
		}
		if esc != 'u' {
			return "", p.notJSON("invalid escape")
		}
		u, ok := p.hex4()
		if !ok {
			return "", p.notJSON("invalid \\u escape")
		}
		r := rune(u)
		switch {
		case utf16.IsSurrogate(r) && r < 0xDC00:
			// A high surrogate must be followed by an escaped low one.
			if low, ok := p.lowSurrogateEscape(); ok {
				r = utf16.DecodeRune(r, low)
			} else {
				lone = true
				continue
			}
		case utf16.IsSurrogate(r):
			lone = true
			continue
		}
		out = utf8.AppendRune(out, r)
	}
}

var simpleEscapes = map[byte]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

func (p *parser) hex4() (uint16, bool) {
	if p.i+4 > len(p.text) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(p.text[p.i:p.i+4]), 16, 16)
	if err != nil {
		return 0, false
	}
	p.i += 4
	return uint16(v), true
}

// lowSurrogateEscape consumes `\uDC00`…`\uDFFF` when it comes next.
func (p *parser) lowSurrogateEscape() (rune, bool) {
	if p.i+6 > len(p.text) || p.text[p.i] != '\\' || p.text[p.i+1] != 'u' {
		return 0, false
	}
	v, err := strconv.ParseUint(string(p.text[p.i+2:p.i+6]), 16, 16)
	if err != nil || v < 0xDC00 || v > 0xDFFF {
		return 0, false
	}
	p.i += 6
	return rune(v), true
}

// number reads RFC 8259's number grammar exactly (no leading zeros, no '+',
// no bare '.'), then checks it is a finite double.
func (p *parser) number() (*node, *Error) {
	start := p.i
	if p.text[p.i] == '-' {
		p.i++
	}
	switch {
	case p.i < len(p.text) && p.text[p.i] == '0':
		p.i++
	case p.i < len(p.text) && p.text[p.i] >= '1' && p.text[p.i] <= '9':
		p.digits()
	default:
		return nil, p.notJSON("invalid number")
	}
	integer := true
	if p.i < len(p.text) && p.text[p.i] == '.' {
		integer = false
		p.i++
		if p.digits() == 0 {
			return nil, p.notJSON("invalid number")
		}
	}
	if p.i < len(p.text) && (p.text[p.i] == 'e' || p.text[p.i] == 'E') {
		integer = false
		p.i++
		if p.i < len(p.text) && (p.text[p.i] == '+' || p.text[p.i] == '-') {
			p.i++
		}
		if p.digits() == 0 {
			return nil, p.notJSON("invalid number")
		}
	}
	f, _ := strconv.ParseFloat(string(p.text[start:p.i]), 64)
	if math.IsInf(f, 0) {
		return nil, newError(ReasonArgumentsNonFiniteNumber, "arguments hold a number beyond the range of a double", nil)
	}
	// Only integer syntax promises an exact integer; 9007199254740993.0 is a double like any other.
	return &node{kind: kindNumber, start: start, end: p.i, unsafeInt: integer && math.Abs(f) > maxSafeInteger}, nil
}

func (p *parser) digits() int {
	n := 0
	for p.i < len(p.text) && p.text[p.i] >= '0' && p.text[p.i] <= '9' {
		p.i++
		n++
	}
	return n
}
