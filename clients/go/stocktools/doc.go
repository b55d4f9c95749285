// Package stocktools holds issue 6's acceptance test for stock gRPC tools: a
// pinned grpcurl and grpc-health-probe, installed from the Go module proxy,
// talk to a real keycap stack through reflection and the standard health
// service, with no keycap code in between: plaintext with the runtime's bearer
// secret, and a stack whose listeners serve TLS (pinned CA, client
// certificates). It has no API.
package stocktools
