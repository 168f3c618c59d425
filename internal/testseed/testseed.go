// Package testseed gives every randomised Ginkgo suite the same seed rule (DESIGN.md,
// conventions): EPPKIT_SEED when it is set, else Ginkgo's random seed (--seed).
package testseed

import (
	"fmt"
	"os"
	"strconv"

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
