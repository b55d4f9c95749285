package sink

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// UnaryServerInterceptor admits every unary call under a capability (metadata
// `authorization: Bearer <capability>`, and `idempotency-key` when the caller
// sends one); a refusal is the reason's gRPC code with an
// ErrorInfo{reason, domain "keycap.dev"}, as the ledger sends it. The handler
// reads the claims with CapabilityFromContext.
func (s *Sink) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		c, err := s.Admit(ctx, grpcRequest(ctx, info.FullMethod))
		if err != nil {
			return nil, err
		}
		return handler(withCapability(ctx, c), req)
	}
}

// StreamServerInterceptor is UnaryServerInterceptor for streams: the
// capability is checked once, when the stream opens.
func (s *Sink) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		c, err := s.Admit(ss.Context(), grpcRequest(ss.Context(), info.FullMethod))
		if err != nil {
			return err
		}
		return handler(srv, &admittedStream{ServerStream: ss, ctx: withCapability(ss.Context(), c)})
	}
}

type admittedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (a *admittedStream) Context() context.Context { return a.ctx }

func grpcRequest(ctx context.Context, method string) Request {
	req := Request{Method: method, Peer: "unknown"}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		req.Peer = p.Addr.String()
	}
	md, _ := metadata.FromIncomingContext(ctx)
	req.Authorization = md.Get("authorization")
	if keys := md.Get("idempotency-key"); len(keys) > 0 {
		req.IdempotencyKey, req.HasIdempotencyKey = keys[0], true
	}
	return req
}
