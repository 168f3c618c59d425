package kind

import (
	"fmt"
	"io"
	"strings"
	"sync"

	kindlog "sigs.k8s.io/kind/pkg/log"
)

// logger writes kind's messages as lines to w: warnings and errors always, info at verbosity 0
// only (kind's progress steps); higher verbosity is dropped.
type logger struct {
	mu *sync.Mutex
	w  io.Writer
}

func newLogger(w io.Writer) kindlog.Logger {
	if w == nil {
		return kindlog.NoopLogger{}
	}
	return logger{mu: &sync.Mutex{}, w: w}
}

func (l logger) line(prefix, msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, "kind: %s%s\n", prefix, strings.TrimRight(msg, "\n"))
}

func (l logger) Warn(m string)                     { l.line("WARNING: ", m) }
func (l logger) Warnf(f string, a ...interface{})  { l.line("WARNING: ", fmt.Sprintf(f, a...)) }
func (l logger) Error(m string)                    { l.line("ERROR: ", m) }
func (l logger) Errorf(f string, a ...interface{}) { l.line("ERROR: ", fmt.Sprintf(f, a...)) }

func (l logger) V(level kindlog.Level) kindlog.InfoLogger {
	if level > 0 {
		return kindlog.NoopInfoLogger{}
	}
	return infoLogger(l)
}

type infoLogger logger

func (l infoLogger) Info(m string)                    { logger(l).line("", m) }
func (l infoLogger) Infof(f string, a ...interface{}) { logger(l).line("", fmt.Sprintf(f, a...)) }
func (l infoLogger) Enabled() bool                    { return true }
