package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestFakeVLLMFleetIPPrefixErrors(t *testing.T) {
	for _, prefix := range []string{"garbage", "127.0.10", "10.0.0.", "127.0.300."} {
		cmd := newFakeVLLMFleetCommand()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs([]string{"--model", "m", "--count", "1", "--port", "0", "--ip-prefix", prefix})
		err := cmd.Execute()
		if err == nil || !strings.Contains(err.Error(), "--ip-prefix") {
			t.Errorf("--ip-prefix %q: error %v, want one naming --ip-prefix", prefix, err)
		}
	}
}
