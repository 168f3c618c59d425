package conformance

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// NotifyInterrupt is how a program that calls Run handles Ctrl-C and SIGTERM as `eppkit
// conformance` does: the first signal cancels ctx (Run lets the test in progress finish, skips the
// rest as interrupted and writes the reports); the second closes abort (Options.Abort: the test
// in progress is abandoned and the reports are written at once), after a line on stderr. stop
// releases the signals; call it when Run returns.
func NotifyInterrupt(parent context.Context, stderr io.Writer) (ctx context.Context, abort <-chan struct{}, stop func()) {
	ctx, cancel := context.WithCancel(parent)
	aborted := make(chan struct{})
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		for n := 0; ; {
			select {
			case <-sigs:
				n++
				if n == 1 {
					cancel()
					continue
				}
				fmt.Fprintln(stderr, "second interrupt: abandoning the test in progress; writing the reports")
				close(aborted)
				return
			case <-done:
				return
			}
		}
	}()
	return ctx, aborted, func() { signal.Stop(sigs); close(done); cancel() }
}
