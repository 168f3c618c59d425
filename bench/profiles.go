package bench

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/eppkit/eppkit/fakes/vllm"
)

// Latency profiles of a fleet's endpoints (SPEC §7): the frozen reference profile and the slow
// one (an older GPU generation), for heterogeneous fleets.
const (
	// ProfileDefault is SPEC §7's frozen reference latency profile (FrozenProfile).
	ProfileDefault = "default"
	// ProfileSlow is SPEC §7's second frozen profile (SlowProfile).
	ProfileSlow = "slow"
)

// ProfileNames lists the latency profiles in the order results print them.
var ProfileNames = []string{ProfileDefault, ProfileSlow}

// ParseFleetProfiles parses --fleet-profiles: comma-separated runs NAME or NAME:COUNT
// ("default:1,slow:1", "default:3,slow"), expanded in order ([default slow], [default default
// default slow]). Names are ProfileNames; "frozen" is accepted for default (SPEC §7 calls it the
// frozen profile). Counts are integers in [1, maxCount]. "" gives nil (every endpoint default).
// Errors name --fleet-profiles and the run.
func ParseFleetProfiles(s string, maxCount int) ([]string, error) {
	var out []string
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, count, hasCount := strings.Cut(part, ":")
		n := 1
		if hasCount {
			v, err := strconv.Atoi(count)
			if err != nil || v < 1 || v > maxCount {
				return nil, fmt.Errorf("--fleet-profiles %q: %q: the count must be an integer in [1,%d]", s, part, maxCount)
			}
			n = v
		}
		if name == "frozen" {
			name = ProfileDefault
		}
		if name != ProfileDefault && name != ProfileSlow {
			return nil, fmt.Errorf("--fleet-profiles %q: unknown profile %q (have %s)", s, name, strings.Join(ProfileNames, ", "))
		}
		for range n {
			out = append(out, name)
		}
		if len(out) > maxCount {
			return nil, fmt.Errorf("--fleet-profiles %q: more than %d endpoints", s, maxCount)
		}
	}
	return out, nil
}

// ProfileOf is endpoint i's profile when profiles are cycled over the fleet: profiles[i mod
// len(profiles)], or ProfileDefault when profiles is empty.
func ProfileOf(profiles []string, i int) string {
	if len(profiles) == 0 {
		return ProfileDefault
	}
	return profiles[i%len(profiles)]
}

// ApplyProfile sets latency profile name on c: SlowProfile for ProfileSlow, FrozenProfile for
// anything else. Both leave the KV cache size, context window, adapters and seed alone.
func ApplyProfile(c *vllm.Config, name string) {
	if name == ProfileSlow {
		SlowProfile(c)
		return
	}
	FrozenProfile(c)
}

// ProfileCounts counts the endpoints of each profile in a fleet of n (ProfileOf).
func ProfileCounts(profiles []string, n int) map[string]int {
	out := map[string]int{}
	for i := range n {
		out[ProfileOf(profiles, i)]++
	}
	return out
}

// ProfileSummary is counts in ProfileNames order ("default ×1, slow ×1").
func ProfileSummary(counts map[string]int) string {
	var parts []string
	for _, name := range ProfileNames {
		if counts[name] > 0 {
			parts = append(parts, fmt.Sprintf("%s ×%d", name, counts[name]))
		}
	}
	return strings.Join(parts, ", ")
}
