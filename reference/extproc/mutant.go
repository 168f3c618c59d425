package extproc

import (
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/eppkit/eppkit/internal/mutant"
)

// Mutant hooks (internal/mutant): in builds without the eppkit_mutants tag mutant.Enabled is the
// constant false and these return the correct values.

// mutantLengthDelta is what the content-length-wrong mutant adds to Content-Length.
func mutantLengthDelta() int {
	if mutant.Enabled && mutant.On(mutant.ContentLengthWrong) {
		return 1
	}
	return 0
}

// mutantSeen are the picks made so far (header-metadata-disagree mutant only).
var mutantSeen sync.Map

// mutantMetadataDest is the pick the dynamic metadata carries: dest, or for the
// header-metadata-disagree mutant another endpoint this EPP picked before (still a pool member,
// so only the header/metadata equality rule is broken).
func mutantMetadataDest(dest string) string {
	if !(mutant.Enabled && mutant.On(mutant.HeaderMetadataDisagree)) {
		return dest
	}
	mutantSeen.Store(dest, true)
	other := dest
	mutantSeen.Range(func(k, _ any) bool {
		if k.(string) != dest {
			other = k.(string)
			return false
		}
		return true
	})
	return other
}

// mutantEndAfterRefusal ends a stream after an ImmediateResponse: cleanly
// (stream-closed-after-refusal) or with a gRPC error (refusal-breaks-stream).
func mutantEndAfterRefusal() error {
	if mutant.On(mutant.RefusalBreaksStream) {
		return status.Error(codes.Internal, "ext_proc: mutant refusal-breaks-stream")
	}
	return nil
}

// mutantPanicOnSplitDone panics when the incomplete SSE line is a strict prefix of
// "data: [DONE]" past "data: " (the usage-split-done-panics mutant).
func mutantPanicOnSplitDone(line []byte) {
	const done = "data: [DONE]"
	if len(line) > len("data: ") && len(line) < len(done) && strings.HasPrefix(done, string(line)) {
		panic("extproc: mutant usage-split-done-panics: data: [DONE] split across chunks")
	}
}
