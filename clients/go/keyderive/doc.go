// Package keyderive is keycap's idempotency-key scheme v1 in Go
// (docs/decisions/0002-key-derivation-scheme.md):
//
//	key = base64url_nopad(SHA-256("keycap/idempotency-key/v1" ‖ 0x00 ‖ JCS(doc)))
//	doc = {"tool_id", "derivation_version", "fields": {pointer: value}, "context"}
//
// It works on the arguments' raw JSON text, never on a decoded Go value:
// encoding/json keeps the last of two duplicate members, replaces a lone
// surrogate with U+FFFD and rounds big integers, each of which would let two
// different calls share a key. The text is parsed strictly (RFC 8259 plus
// I-JSON, noncharacters accepted) and refused with the kernel's reasons, in the
// kernel's order; the named values are then canonicalised by RFC 8785 (JCS,
// github.com/gowebpki/jcs) and hashed. The published vectors
// (test/vectors/key-derivation.json) pin every byte.
//
// A sink that receives a call's arguments uses it to re-derive the key a
// capability names (ADR 0026); the kernel remains the only place keys are
// minted.
package keyderive
