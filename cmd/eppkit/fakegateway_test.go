package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestFakeGatewayFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--mode", "fast"}, "--mode"},
		{[]string{"--failure-mode", "maybe"}, "--failure-mode"},
		{[]string{"--epp-tls", "tls"}, "--epp-tls"},
		{[]string{"--epp", "127.0.0.1:1", "--body-chunk-size", "0"}, "--body-chunk-size"},
		{[]string{"--epp", "127.0.0.1:1", "--message-timeout", "0s"}, "--message-timeout"},
		{[]string{}, "EPPAddress"},
		{[]string{"--mode", "round-robin"}, "Endpoints"},
		{[]string{"--epp", "127.0.0.1:1", "--endpoints", "nope"}, "--endpoints"},
		{[]string{"--epp", "127.0.0.1:1", "--listen", "256.0.0.1:1"}, "--listen"},
		{[]string{"--epp", "127.0.0.1:1", "--status-on-error", "99"}, "--status-on-error"},
		{[]string{"--epp", "127.0.0.1:1", "--status-on-error", "200"}, "--status-on-error"},
		{[]string{"--epp", "127.0.0.1:1", "--status-on-error", "600"}, "--status-on-error"},
		{[]string{"--epp", "127.0.0.1:1", "--body-chunk-size", "4194304"}, "--body-chunk-size"},
		{[]string{"--epp", "127.0.0.1"}, "--epp"},
		{[]string{"--epp", "127.0.0.1:1", "--failure-mode", "open"}, "--endpoints"},
		{[]string{"--epp", "127.0.0.1:1", "--endpoints", "localhost:8000"}, "--endpoints"},
		{[]string{"--epp", "127.0.0.1:1", "--endpoints", "10.0.0.1:8000,10.0.0.1:8000"}, "--endpoints"},
		{[]string{"--epp", "127.0.0.1:1", "--endpoints", "10.0.0.1"}, "--endpoints"},
	} {
		cmd := newFakeGatewayCommand()
		cmd.SetArgs(tc.args)
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		err := cmd.Execute()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one naming %s", tc.args, err, tc.want)
		}
	}
}
