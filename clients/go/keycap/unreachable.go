package keycap

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/keycap/keycap/clients/go/reasons"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
)

// service is a keycap service as a person knows it, and the setting that
// chose its address (after "comes from").
type service struct {
	what    string
	setting string
	// kernel: its calls are refused PRINCIPAL_CREDENTIAL_MISSING without a
	// runtime credential, which the default lookup supplies.
	kernel bool
}

var (
	kernelService = service{what: "keycap kernel", kernel: true,
		setting: "NewKernelClient(address) (keycap's CLI and examples read KEYCAP_KERNEL_ADDRESS, default 127.0.0.1:50051)"}
	accessService = service{what: "keycap kernel",
		setting: "NewAccessClient(address) (keycap's CLI reads KEYCAP_KERNEL_ADDRESS, default 127.0.0.1:50051)"}
	ledgerService = service{what: "keycap ledger",
		setting: "WithLedger(address) or NewLedgerClient(address) (keycap's examples read KEYCAP_LEDGER_ADDRESS, default 127.0.0.1:50052)"}
	adminService = service{what: "keycap ledger admin service",
		setting: "NewAdminClient(address) (keycap's CLI reads KEYCAP_ADMIN_ADDRESS, default 127.0.0.1:50053)"}
)

// explainErrors is the dial option that makes a connection's errors name the
// fix where the client knows one (explain). Codes, reasons and details stay
// the service's; only the message for people changes.
func explainErrors(svc service, address string, o options, bearerSent bool) grpc.DialOption {
	return grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err == nil {
			return nil
		}
		return explain(err, svc, address, o.callTimeout, bearerSent, cc.GetState())
	})
}

// explain rewrites the message of err, a gRPC status error, when it says
//   - that the service was never reached: UNAVAILABLE, or DEADLINE_EXCEEDED
//     while the connection is not ready, without a keycap reason (a service
//     that answers sends one): the service, its address and the setting that
//     chose it, and the deadline's settings;
//   - that a kernel call sent without a bearer was refused
//     PRINCIPAL_CREDENTIAL_MISSING: where the default lookup looked.
//
// Anything else is returned as is.
func explain(err error, svc service, address string, callTimeout time.Duration, bearerSent bool, state connectivity.State) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	kerr := FromError(err)
	var msg string
	switch {
	case svc.kernel && !bearerSent && kerr.Reason == reasons.PrincipalCredentialMissing:
		msg = st.Message() + "; " + MissingCredentialHint()
	case kerr.Reason != codeName(st.Code()):
		return err
	case st.Code() == codes.Unavailable, st.Code() == codes.DeadlineExceeded && state != connectivity.Ready:
		msg = fmt.Sprintf("the %s at %s could not be reached (%s; waited until the call's deadline: its context's, else WithCallTimeout's, %s); "+
			"is keycap serve (make run) running there? The address comes from %s. [grpc: %s]",
			svc.what, address, unreachableCause(st, state), timeoutText(callTimeout), svc.setting, st.Message())
	default:
		return err
	}
	p := st.Proto()
	p.Message = msg
	return status.ErrorProto(p)
}

func unreachableCause(st *status.Status, state connectivity.State) string {
	text := strings.ToLower(st.Message())
	switch {
	case strings.Contains(text, "connection refused"):
		return "the connection was refused"
	case strings.Contains(text, "no such host") || strings.Contains(text, "name resolver"):
		return "the host name does not resolve"
	case state == connectivity.TransientFailure:
		return "no connection could be made"
	case state == connectivity.Connecting || state == connectivity.Idle:
		return "no connection was made yet"
	}
	return "no connection could be made or kept"
}

func timeoutText(d time.Duration) string {
	if d <= 0 {
		return "none"
	}
	return d.String()
}
