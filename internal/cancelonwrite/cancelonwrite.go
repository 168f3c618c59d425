// Package cancelonwrite is a test aid for interrupted runs: an io.Writer that keeps what is
// written and cancels a context the first time the text contains a marker, as a user pressing
// Ctrl-C on seeing a line would.
package cancelonwrite

import (
	"context"
	"strings"
	"sync"
)

// Writer records everything written and calls Cancel once Marker appears in the accumulated text
// (later writes call it again, which a context.CancelFunc allows). Safe for concurrent use.
type Writer struct {
	Marker string
	Cancel context.CancelFunc

	mu  sync.Mutex
	buf strings.Builder
}

// Write implements io.Writer; it never fails.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.Marker) {
		w.Cancel()
	}
	return len(p), nil
}

// String returns everything written so far.
func (w *Writer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
