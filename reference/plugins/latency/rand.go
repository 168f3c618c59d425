package latency

import (
	"math/rand/v2"
	"sync"

	"github.com/cespare/xxhash/v2"
)

// lockedRand is a seeded random source safe for concurrent use. Each plugin instance derives
// its stream from the handle's seed and its own name, so two filters never share draws.
type lockedRand struct {
	mu sync.Mutex
	r  *rand.Rand
}

func newLockedRand(seed int64, name string) *lockedRand {
	return &lockedRand{r: rand.New(rand.NewPCG(uint64(seed), xxhash.Sum64String(name)))}
}

// float64 returns a uniform float in [0,1).
func (l *lockedRand) float64() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Float64()
}
