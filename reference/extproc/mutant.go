package extproc

import (
	"net"
	"strconv"
	"strings"

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

// mutantMetadataDest is the pick the dynamic metadata carries: dest, or for the
// header-metadata-disagree mutant the first target with its port plus one.
func mutantMetadataDest(dest string) string {
	if !(mutant.Enabled && mutant.On(mutant.HeaderMetadataDisagree)) {
		return dest
	}
	first, _, _ := strings.Cut(dest, ",")
	host, port, err := net.SplitHostPort(first)
	if err != nil {
		return dest + "0"
	}
	n, _ := strconv.Atoi(port)
	return net.JoinHostPort(host, strconv.Itoa(n+1))
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
