package harness

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestTimeoutConfig(t *testing.T) {
	c, err := ParseTimeoutConfig([]byte("targetReady: 2m\npoll: 10ms\nrequiredConsecutiveSuccesses: 5\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultTimeoutConfig()
	want.TargetReady, want.Poll, want.RequiredConsecutiveSuccesses = Duration(2*time.Minute), Duration(10*time.Millisecond), 5
	if diff := cmp.Diff(want, c); diff != "" {
		t.Fatalf("(-want +got)\n%s", diff)
	}
	// Every bad value is refused with a message naming its key.
	for bad, key := range map[string]string{"targetReedy: 1s": "targetReedy", "poll: 0s": "poll", "poll: fast": "poll",
		"requiredConsecutiveSuccesses: 0": "requiredConsecutiveSuccesses", "targetReady: 5s\ntargetRefused: abc": "targetRefused",
		"request: 5": "request", "request: 5s\ntestTimeout: [1]": "testTimeout"} {
		if _, err := ParseTimeoutConfig([]byte(bad)); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("ParseTimeoutConfig(%q) error = %v, want one naming %s", bad, err, key)
		}
	}
}

func TestEventually(t *testing.T) {
	// Needs 3 consecutive successes; the condition flaps once after two, so it takes 6 calls.
	seq := []bool{true, true, false, true, true, true}
	i := 0
	err := Eventually(5*time.Second, time.Millisecond, 3, func() error {
		ok := seq[min(i, len(seq)-1)]
		i++
		if !ok {
			return errors.New("flap")
		}
		return nil
	})
	if err != nil || i != 6 {
		t.Fatalf("Eventually = %v after %d calls, want nil after 6", err, i)
	}
	err = Eventually(30*time.Millisecond, 5*time.Millisecond, 2, func() error { return errors.New("never") })
	var ee *EventuallyError
	if !errors.As(err, &ee) || ee.Last.Error() != "never" || ee.BestRun != 0 {
		t.Fatalf("Eventually = %v", err)
	}
}
