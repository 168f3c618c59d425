// Package logtail reads the end of a log file, for error messages that quote what a process that
// failed to start or exited last wrote.
package logtail

import (
	"os"
	"strings"
)

// Lines returns the last n lines of the file at path, without their line endings; nil when the
// file cannot be read or n ≤ 0.
func Lines(path string, n int) []string {
	if path == "" || n <= 0 {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return nil
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines
}

// String returns the last n lines of the file at path joined by newlines ("" when unreadable).
func String(path string, n int) string { return strings.Join(Lines(path, n), "\n") }
