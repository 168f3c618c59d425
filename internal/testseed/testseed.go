// Package testseed gives every randomised Ginkgo suite the same seed rule (DESIGN.md,
// conventions): EPPKIT_SEED when it is set, else Ginkgo's random seed (--seed).
package testseed

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/onsi/ginkgo/v2"
)

// Seed returns EPPKIT_SEED when set, else ginkgo.GinkgoRandomSeed(). A value that is not an
// integer fails the current spec with a message naming the variable.
func Seed() int64 {
	if s := os.Getenv("EPPKIT_SEED"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			ginkgo.Fail(fmt.Sprintf("EPPKIT_SEED=%q is not an integer: %v", s, err))
		}
		return v
	}
	return ginkgo.GinkgoRandomSeed()
}

// Repro is the command that reruns a spec of a suite with its seed, printed on failure.
type Repro struct {
	// Seed is the spec's seed (Seed()).
	Seed int64
	// Suite is the suite's folder under suites/ ("dag").
	Suite string
	// LabelFilter and Focus select the spec ("" = no flag).
	LabelFilter, Focus string
	// Race adds --race (the suites run with it in make test).
	Race bool
	// Env is more environment the run needs ("EPPKIT_PROVIDER=kind"), before the command.
	Env []string
}

// Command is the shell command: "EPPKIT_SEED=<seed> [Env] go run github.com/onsi/ginkgo/v2/ginkgo
// [--race] [--label-filter=<filter>] [--focus=<quoted focus>] ./suites/<suite>".
func (r Repro) Command() string {
	parts := append([]string{fmt.Sprintf("EPPKIT_SEED=%d", r.Seed)}, r.Env...)
	parts = append(parts, "go run github.com/onsi/ginkgo/v2/ginkgo")
	if r.Race {
		parts = append(parts, "--race")
	}
	if r.LabelFilter != "" {
		parts = append(parts, "--label-filter="+r.LabelFilter)
	}
	if r.Focus != "" {
		parts = append(parts, "--focus="+strconv.Quote(r.Focus))
	}
	return strings.Join(append(parts, "./suites/"+r.Suite), " ")
}

// String is "seed <seed>; reproduce with: <Command>".
func (r Repro) String() string {
	return fmt.Sprintf("seed %d; reproduce with: %s", r.Seed, r.Command())
}
