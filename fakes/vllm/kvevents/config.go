// Package kvevents publishes a fake vLLM engine's KV-cache events as vLLM does: msgpack
// KVEventBatch messages on a ZMQ PUB socket, three frames each (topic, 8-byte big-endian
// sequence number, payload), with a ROUTER replay socket serving buffered batches from a
// sequence number (vllm/distributed/kv_events.py ZmqEventPublisher; configured by
// vllm/config/kv_events.py KVEventsConfig, vLLM's --kv-events-config). The events come from
// fakes/vllm/engine (Config.KVEvents); the wire format is documented on EncodeBatch and the
// socket protocol on Publisher. The ZMQ implementation is the pure-Go github.com/go-zeromq/zmq4
// (as llm-d-inference-sim and llm-d-router use), msgpack is github.com/vmihailenco/msgpack/v5.
package kvevents

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Config is vLLM's KVEventsConfig (vllm/config/kv_events.py), the JSON of --kv-events-config,
// with vLLM's field names and defaults (DefaultConfig).
type Config struct {
	// EnableKVCacheEvents turns the events on (enable_kv_cache_events, default false).
	EnableKVCacheEvents bool `json:"enable_kv_cache_events"`
	// Publisher is "zmq" or "null" (publisher); empty means "zmq" when events are enabled, else
	// "null" (vLLM's __post_init__).
	Publisher string `json:"publisher"`
	// Endpoint is the PUB socket's address (endpoint, default "tcp://*:5557"). As vLLM decides:
	// an address with "*" or "::" is bound, any other is connected to (a central subscriber
	// binds it). The fake binds "*" on its own --host: every fake of a fleet shares one network
	// namespace, where a pod's wildcard would cover only its own IP. Data-parallel rank (engine)
	// i uses the port + i (vLLM offset_endpoint_port).
	Endpoint string `json:"endpoint"`
	// ReplayEndpoint is the ROUTER socket's address for replay requests (replay_endpoint,
	// default none: no replay). Always bound; "*" as for Endpoint; port + i for rank i.
	ReplayEndpoint *string `json:"replay_endpoint"`
	// BufferSteps is how many past batches the replay socket can serve (buffer_steps, default
	// 10000).
	BufferSteps int `json:"buffer_steps"`
	// HWM is the PUB socket's high-water mark in messages: batches beyond it, queued for
	// sending, are dropped (hwm, default 100000).
	HWM int `json:"hwm"`
	// MaxQueueSize bounds the batches waiting for the publisher (max_queue_size, default
	// 100000). vLLM's scheduler blocks on a full queue; the fake never blocks its engine and drops
	// the batch instead, which a subscriber sees as a gap in the sequence numbers.
	MaxQueueSize int `json:"max_queue_size"`
	// Topic is the first frame of every message (topic, default ""); the fake's server fills an
	// empty topic with "kv@<host>:<port>@<model>" (Topic), the form llm-d's subscribers filter on
	// ("kv@").
	Topic string `json:"topic"`
}

// DefaultConfig returns vLLM's defaults (events off).
func DefaultConfig() Config {
	return Config{Endpoint: "tcp://*:5557", BufferSteps: 10_000, HWM: 100_000, MaxQueueSize: 100_000}
}

// Enabled reports whether events are published (enabled with the zmq publisher).
func (c Config) Enabled() bool { return c.EnableKVCacheEvents && c.Publisher == "zmq" }

// ParseConfig parses the JSON of --kv-events-config onto DefaultConfig: unknown fields and wrong
// types are errors naming the field, as are out-of-range values (Validate).
func ParseConfig(s string) (Config, error) {
	c := DefaultConfig()
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &te) && te.Field != "":
			return c, fmt.Errorf("kv-events-config: field %q must be %s, got %s", te.Field, te.Type.String(), te.Value)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			return c, fmt.Errorf("kv-events-config: unknown field %s (vLLM's KVEventsConfig has enable_kv_cache_events, publisher, endpoint, replay_endpoint, buffer_steps, hwm, max_queue_size, topic)",
				strings.TrimPrefix(err.Error(), "json: unknown field "))
		}
		return c, fmt.Errorf("kv-events-config: want a JSON object: %v", err)
	}
	if dec.More() {
		return c, errors.New("kv-events-config: trailing data after the JSON object")
	}
	if err := c.Validate(); err != nil {
		return c, err
	}
	return c, nil
}

// Validate fills Publisher's default and checks every field, naming the first bad one.
func (c *Config) Validate() error {
	if c.Publisher == "" {
		c.Publisher = "null"
		if c.EnableKVCacheEvents {
			c.Publisher = "zmq"
		}
	}
	switch c.Publisher {
	case "zmq", "null":
	default:
		return fmt.Errorf("kv-events-config: field \"publisher\" must be \"zmq\" or \"null\", got %q", c.Publisher)
	}
	if err := checkEndpoint("endpoint", c.Endpoint); err != nil {
		return err
	}
	if c.ReplayEndpoint != nil {
		if err := checkEndpoint("replay_endpoint", *c.ReplayEndpoint); err != nil {
			return err
		}
	}
	for _, f := range []struct {
		name string
		v    int
		min  int
	}{{"buffer_steps", c.BufferSteps, 0}, {"hwm", c.HWM, 0}, {"max_queue_size", c.MaxQueueSize, 1}} {
		if f.v < f.min {
			return fmt.Errorf("kv-events-config: field %q must be at least %d, got %d", f.name, f.min, f.v)
		}
	}
	return nil
}

// checkEndpoint accepts tcp://host:port (host "*" for every address of the fake's host).
func checkEndpoint(field, ep string) error {
	rest, ok := strings.CutPrefix(ep, "tcp://")
	if !ok {
		return fmt.Errorf("kv-events-config: field %q: %q is not a tcp:// address (the fake serves ZMQ over TCP only)", field, ep)
	}
	i := strings.LastIndexByte(rest, ':')
	if i <= 0 {
		return fmt.Errorf("kv-events-config: field %q: %q has no host:port", field, ep)
	}
	if p, err := strconv.Atoi(rest[i+1:]); err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("kv-events-config: field %q: %q has no port in [0, 65535]", field, ep)
	}
	return nil
}

// OffsetEndpoint returns ep with its port moved up by rank (vLLM
// ZmqEventPublisher.offset_endpoint_port: each data-parallel rank publishes on its own port).
// A port of 0 (pick a free one) stays 0.
func OffsetEndpoint(ep string, rank int) string {
	i := strings.LastIndexByte(ep, ':')
	p, err := strconv.Atoi(ep[i+1:])
	if rank == 0 || err != nil || p == 0 {
		return ep
	}
	return ep[:i+1] + strconv.Itoa(p+rank)
}

// bindAddress reports whether ep is bound (vLLM's rule: "*" or "::" in the address) and the
// address to bind or dial, with "*" replaced by host.
func bindAddress(ep, host string) (string, bool) {
	if strings.Contains(ep, "*") {
		if host == "" || host == "0.0.0.0" {
			host = "0.0.0.0"
		}
		return strings.Replace(ep, "*", host, 1), true
	}
	return ep, strings.Contains(ep, "::")
}

// Topic is the fake's topic when the config names none: "kv@<host>:<port>@<model>", with the
// server's address and served model name (the llm-d convention kv@<pod>@<model>, with the pod
// named by its address as llm-d-router keys its index by endpoint address).
func Topic(host string, port int, model string) string {
	var b bytes.Buffer
	b.WriteString("kv@")
	b.WriteString(host)
	b.WriteByte(':')
	b.WriteString(strconv.Itoa(port))
	b.WriteByte('@')
	b.WriteString(model)
	return b.String()
}
