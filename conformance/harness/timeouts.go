package harness

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"time"

	"sigs.k8s.io/yaml"
)

// TimeoutConfig holds every wait of the suite in one place (gateway-api conformance/utils/config
// TimeoutConfig is the model). Load overrides from YAML with LoadTimeoutConfig (`--timeout-config`);
// keys are the JSON tags, values Go duration strings ("5s", "250ms").
type TimeoutConfig struct {
	// TargetReady bounds the wait for the target's gRPC health SERVING and an ext_proc stream that
	// answers with anything but a 503 refusal (WaitReadyRecord).
	TargetReady Duration `json:"targetReady"`
	// TargetRefused is how long every connection to an address target (--target address) may be
	// refused before the harness gives up early: nothing listens there (ReadyProbe.RefusedGrace).
	// Command targets always get the whole TargetReady.
	TargetRefused Duration `json:"targetRefused"`
	// HarnessStart bounds starting the fleet, the endpoint source and the gateway.
	HarnessStart Duration `json:"harnessStart"`
	// Request bounds one request through the gateway or one ext_proc exchange.
	Request Duration `json:"request"`
	// MetricsPropagation bounds how long after pinning a fake's metrics the EPP may still route on
	// the old values (its scrape interval plus slack).
	MetricsPropagation Duration `json:"metricsPropagation"`
	// EndpointChange bounds how long the EPP may take to observe an endpoint added or removed.
	EndpointChange Duration `json:"endpointChange"`
	// Poll is the interval between attempts of the Must* helpers.
	Poll Duration `json:"poll"`
	// RequiredConsecutiveSuccesses is how many consecutive successful checks make an eventual
	// condition hold (the anti-flake primitive).
	RequiredConsecutiveSuccesses int `json:"requiredConsecutiveSuccesses"`
	// TestTimeout bounds one whole test.
	TestTimeout Duration `json:"testTimeout"`
	// TargetStop bounds the graceful stop of a command target before it is killed.
	TargetStop Duration `json:"targetStop"`
	// LeaderFailover bounds how long after the leading replica of an EPP dies another replica
	// reports readiness SERVING: the lease expiring (controller-runtime's default lease duration,
	// 15 s, after a crash) plus a retry period (2 s) and the readiness poll.
	LeaderFailover Duration `json:"leaderFailover"`
	// PredictorWarmup bounds how long a learning EPP may take, while the PredictedLatency test
	// sends it warm-up traffic, before it routes by predicted latency.
	PredictorWarmup Duration `json:"predictorWarmup"`
	// ServingGrace bounds how long after its gRPC health first answered SERVING an EPP may still
	// refuse requests with 503 for want of endpoints (EPPReadyRoutes).
	ServingGrace Duration `json:"servingGrace"`
}

// DefaultTimeoutConfig returns the defaults: generous enough for a loaded 2-core CI machine.
func DefaultTimeoutConfig() TimeoutConfig {
	return TimeoutConfig{
		TargetReady:                  Duration(60 * time.Second),
		TargetRefused:                Duration(DefaultRefusedGrace),
		HarnessStart:                 Duration(60 * time.Second),
		Request:                      Duration(10 * time.Second),
		MetricsPropagation:           Duration(5 * time.Second),
		EndpointChange:               Duration(15 * time.Second),
		Poll:                         Duration(50 * time.Millisecond),
		RequiredConsecutiveSuccesses: 3,
		TestTimeout:                  Duration(3 * time.Minute),
		TargetStop:                   Duration(5 * time.Second),
		PredictorWarmup:              Duration(90 * time.Second),
		LeaderFailover:               Duration(30 * time.Second),
		ServingGrace:                 Duration(2 * time.Second),
	}
}

// Validate reports the first non-positive field, by its YAML key.
func (c TimeoutConfig) Validate() error {
	for _, f := range []struct {
		name string
		d    Duration
	}{{"targetReady", c.TargetReady}, {"targetRefused", c.TargetRefused}, {"harnessStart", c.HarnessStart}, {"request", c.Request},
		{"metricsPropagation", c.MetricsPropagation}, {"endpointChange", c.EndpointChange},
		{"poll", c.Poll}, {"testTimeout", c.TestTimeout}, {"targetStop", c.TargetStop},
		{"predictorWarmup", c.PredictorWarmup}, {"leaderFailover", c.LeaderFailover},
		{"servingGrace", c.ServingGrace}} {
		if f.d <= 0 {
			return fmt.Errorf("timeout config: %s must be > 0, got %s", f.name, time.Duration(f.d))
		}
	}
	if c.RequiredConsecutiveSuccesses < 1 {
		return fmt.Errorf("timeout config: requiredConsecutiveSuccesses must be >= 1, got %d", c.RequiredConsecutiveSuccesses)
	}
	return nil
}

// LoadTimeoutConfig reads a YAML file of overrides on top of DefaultTimeoutConfig. Unknown keys
// and invalid values are errors naming the key.
func LoadTimeoutConfig(path string) (TimeoutConfig, error) {
	c := DefaultTimeoutConfig()
	if path == "" {
		return c, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("timeout config: %w", err)
	}
	return ParseTimeoutConfig(b)
}

// ParseTimeoutConfig parses YAML overrides on top of DefaultTimeoutConfig.
func ParseTimeoutConfig(b []byte) (TimeoutConfig, error) {
	c := DefaultTimeoutConfig()
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return c, fmt.Errorf("timeout config: %w", keyOfError(b, err))
	}
	return c, c.Validate()
}

// keyOfError names the key whose value made err: the decoder's own type errors (a duration that
// does not parse) do not say which key they came from. It parses each top-level key alone and
// returns the first one that fails, prefixed with its name; err itself when none does alone
// (an unknown or duplicate key, a document that is not a mapping: those messages are clear).
func keyOfError(b []byte, err error) error {
	j, jerr := yaml.YAMLToJSON(b)
	var m map[string]json.RawMessage
	if jerr != nil || json.Unmarshal(j, &m) != nil {
		return err
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		one, _ := json.Marshal(map[string]json.RawMessage{k: m[k]})
		var probe TimeoutConfig
		if e := yaml.UnmarshalStrict(one, &probe); e != nil {
			return fmt.Errorf("%s: %w", k, e)
		}
	}
	return err
}

// Duration is a time.Duration that reads and writes as a Go duration string in YAML/JSON.
type Duration time.Duration

// D returns the time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// MarshalJSON writes the duration as a string such as "1.5s".
func (d Duration) MarshalJSON() ([]byte, error) {
	return []byte(`"` + time.Duration(d).String() + `"`), nil
}

// UnmarshalJSON reads a Go duration string ("250ms", "5s").
func (d *Duration) UnmarshalJSON(b []byte) error {
	if len(b) < 2 || b[0] != '"' || b[len(b)-1] != '"' {
		return fmt.Errorf("invalid duration %s: want a Go duration with its unit, such as 5s or 250ms", b)
	}
	v, err := time.ParseDuration(string(b[1 : len(b)-1]))
	if err != nil {
		return fmt.Errorf("invalid duration %s: want a Go duration such as 5s or 250ms", b)
	}
	*d = Duration(v)
	return nil
}
