package sink_test

import (
	"context"
	"crypto/ed25519"
	"testing"
	"time"

	"github.com/keycap/keycap/clients/go/internal/capsigner"
	"github.com/keycap/keycap/clients/go/sink"
)

func BenchmarkAdmitIdempotent(b *testing.B) {
	signer, _ := capsigner.Load("kernel-current")
	keys, _ := sink.NewStaticKeys(signer.JWKS)
	s, _ := sink.New(sink.Options{Name: "bench", Tools: []string{"payments.charge"}, Keys: keys})
	req := sink.Request{Method: "/x", Peer: "127.0.0.1:1", Authorization: []string{"Bearer " + signer.Sign(capsigner.Claims("payments.charge", "idempotent", "b", time.Now()))}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Admit(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEd25519VerifyAlone(b *testing.B) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	msg := make([]byte, 400)
	sig := ed25519.Sign(priv, msg)
	for b.Loop() {
		ed25519.Verify(pub, msg, sig)
	}
}
