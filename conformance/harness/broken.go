package harness

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
)

// brokenPicks is how many requests in a row the gateway must have refused for a malformed pick
// before the run calls the EPP's pick broken (BrokenCause).
const brokenPicks = 3

// BrokenCause says why the run already knows the target's ext_proc answers are broken, "" while
// it does not: a phase the EPP left unanswered extprocclient.DefaultStallThreshold times in a row
// (Stalls), whose latest wait stalled too, or brokenPicks requests in a row whose pick the gateway could not route because it is
// no list of ip:port. Waits that poll the EPP (MustEventually) stop at the first failed attempt
// once it is set, failing with their own last error and this cause, instead of polling until
// their bound: the run then fails every test within seconds with the same named cause, while a
// test that does not touch the broken part still passes. An answer of the stalled phase, or a
// request forwarded, clears it until the next stall.
func (s *Suite) BrokenCause() string {
	if s == nil {
		return ""
	}
	for _, p := range []extprocclient.Phase{extprocclient.PhaseRequestHeaders, extprocclient.PhaseRequestBody,
		extprocclient.PhaseResponseHeaders, extprocclient.PhaseResponseBody} {
		if broken, n := s.Stalls.Broken(p); broken {
			return fmt.Sprintf("the EPP keeps leaving the %s phase unanswered (%d stalls in this run, the latest just now)", p, n)
		}
	}
	if s.Gateway != nil {
		if n, msg := s.Gateway.MalformedPicks(); n >= brokenPicks {
			return fmt.Sprintf("the last %d requests through the gateway could not be routed: %s", n, msg)
		}
	}
	return ""
}

// errorsOnly passes on only records at slog.LevelError or above: the gateway logs every request
// the EPP fails as a warning, which a run against a broken EPP would print thousands of times;
// the tests report those failures themselves.
type errorsOnly struct{ slog.Handler }

func (h errorsOnly) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelError && h.Handler.Enabled(ctx, l)
}

func (h errorsOnly) WithAttrs(as []slog.Attr) slog.Handler {
	return errorsOnly{h.Handler.WithAttrs(as)}
}

func (h errorsOnly) WithGroup(name string) slog.Handler { return errorsOnly{h.Handler.WithGroup(name)} }
