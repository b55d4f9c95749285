package keyderive

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// The published vectors pin the scheme byte for byte: every implementation
// (the kernel, Python, this one) must give each vector's key and canonical
// document, or its refusal reason.
type vectorFile struct {
	Scheme  string `json:"scheme"`
	Vectors []struct {
		Name          string  `json:"name"`
		ToolID        string  `json:"tool_id"`
		ArgumentsJSON *string `json:"arguments_json"`
		ArgumentsHex  string  `json:"arguments_utf8_hex"`
		Derivation    struct {
			Fields        []string `json:"fields"`
			Version       int64    `json:"version"`
			ContextFields []string `json:"context_fields"`
		} `json:"derivation"`
		Context struct {
			RunID    string `json:"run_id"`
			RunIDHex string `json:"run_id_utf8_hex"`
		} `json:"context"`
		Expect struct {
			Key       string `json:"key"`
			Canonical string `json:"canonical"`
			Error     string `json:"error"`
		} `json:"expect"`
	} `json:"vectors"`
}

func TestKeyDerivationVectors(t *testing.T) {
	text, err := os.ReadFile(filepath.Join("..", "..", "..", "test", "vectors", "key-derivation.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f vectorFile
	if err := json.Unmarshal(text, &f); err != nil {
		t.Fatal(err)
	}
	if f.Scheme != Scheme || len(f.Vectors) < 100 {
		t.Fatalf("scheme %q, %d vectors", f.Scheme, len(f.Vectors))
	}
	for _, v := range f.Vectors {
		t.Run(v.Name, func(t *testing.T) {
			// Bytes, not Go strings decoded by encoding/json: ill-formed UTF-8 must reach the deriver as sent.
			args := []byte(derefOr(v.ArgumentsJSON))
			if v.ArgumentsHex != "" {
				args = mustHex(t, v.ArgumentsHex)
			}
			runID := v.Context.RunID
			if v.Context.RunIDHex != "" {
				runID = string(mustHex(t, v.Context.RunIDHex))
			}
			d := Derivation{Fields: v.Derivation.Fields, Version: v.Derivation.Version, ContextFields: v.Derivation.ContextFields}
			ctx := Context{RunID: runID}
			key, err := Key(v.ToolID, d, args, ctx)
			if v.Expect.Error != "" {
				var e *Error
				if !errors.As(err, &e) || e.Reason != v.Expect.Error {
					t.Fatalf("want refusal %s, got key %q err %v", v.Expect.Error, key, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("want key %s, got %v", v.Expect.Key, err)
			}
			doc, _ := CanonicalDocument(v.ToolID, d, args, ctx)
			if string(doc) != v.Expect.Canonical {
				t.Fatalf("canonical\n got %s\nwant %s", doc, v.Expect.Canonical)
			}
			if key != v.Expect.Key {
				t.Fatalf("key %s, want %s", key, v.Expect.Key)
			}
		})
	}
}

func derefOr(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
