package kvevents

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/eppkit/eppkit/fakes/vllm/engine"
)

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig(`{"enable_kv_cache_events":true}`)
	if err != nil || !c.Enabled() || c.Publisher != "zmq" || c.Endpoint != "tcp://*:5557" || c.ReplayEndpoint != nil ||
		c.BufferSteps != 10000 || c.HWM != 100000 || c.MaxQueueSize != 100000 || c.Topic != "" {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	if c, err := ParseConfig(`{}`); err != nil || c.Enabled() || c.Publisher != "null" {
		t.Fatalf("{}: %+v %v, want events off with the null publisher", c, err)
	}
	if c, err := ParseConfig(`{"enable_kv_cache_events":true,"publisher":"null"}`); err != nil || c.Enabled() {
		t.Fatalf("null publisher: %+v %v", c, err)
	}
	for in, want := range map[string]string{
		`{"enable_kv_cache_events":true,"endpont":"tcp://*:1"}`: `unknown field "endpont"`,
		`{"enable_kv_cache_events":"yes"}`:                      `field "enable_kv_cache_events" must be bool`,
		`{"buffer_steps":1.5}`:                                  `field "buffer_steps" must be int`,
		`{"publisher":"kafka"}`:                                 `field "publisher" must be "zmq" or "null"`,
		`{"endpoint":"ipc:///tmp/x"}`:                           `field "endpoint": "ipc:///tmp/x" is not a tcp://`,
		`{"endpoint":"tcp://host"}`:                             `field "endpoint": "tcp://host" has no host:port`,
		`{"replay_endpoint":"tcp://*:99999"}`:                   `field "replay_endpoint": "tcp://*:99999" has no port`,
		`{"hwm":-1}`:                                            `field "hwm" must be at least 0`,
		`{"max_queue_size":0}`:                                  `field "max_queue_size" must be at least 1`,
		`{"topic":"a"} {}`:                                      `trailing data`,
		`[1]`:                                                   `want a JSON object`,
	} {
		if _, err := ParseConfig(in); err == nil || !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "kv-events-config: ") {
			t.Errorf("%s: error %v, want one containing %q", in, err, want)
		}
	}
}

func TestOffsetAndBind(t *testing.T) {
	if got := OffsetEndpoint("tcp://*:5557", 2); got != "tcp://*:5559" {
		t.Errorf("offset: %s", got)
	}
	if got := OffsetEndpoint("tcp://*:0", 2); got != "tcp://*:0" {
		t.Errorf("offset of port 0: %s", got)
	}
	if ep, bind := bindAddress("tcp://*:5557", "127.0.10.3"); !bind || ep != "tcp://127.0.10.3:5557" {
		t.Errorf("wildcard: %s %v", ep, bind)
	}
	if ep, bind := bindAddress("tcp://indexer:5557", "127.0.10.3"); bind || ep != "tcp://indexer:5557" {
		t.Errorf("named host: %s %v, want a dial", ep, bind)
	}
}

// TestEncodeBatchBytes pins the bytes of msgspec's encoding: positional arrays, the tag first,
// integers in their shortest form, ts as a float64.
func TestEncodeBatchBytes(t *testing.T) {
	at := time.Unix(1, 500_000_000)
	for _, tc := range []struct {
		ev   engine.KVEvent
		maps bool
		want string
	}{
		{engine.KVEvent{Type: engine.AllBlocksCleared}, false, "93" + "cb3ff8000000000000" + "91" + "91b0" + hex.EncodeToString([]byte("AllBlocksCleared")) + "02"},
		{engine.KVEvent{Type: engine.BlockRemoved, BlockHashes: []uint64{5, 1 << 40}}, false,
			"93cb3ff8000000000000" + "91" + "93ac" + hex.EncodeToString([]byte("BlockRemoved")) + "92" + "05" + "cf0000010000000000" + "a3" + hex.EncodeToString([]byte("GPU")) + "02"},
		{engine.KVEvent{Type: engine.BlockStored, BlockHashes: []uint64{7}, TokenIDs: []uint32{1, 300}, BlockSize: 2}, false,
			"93cb3ff8000000000000" + "91" + "98ab" + hex.EncodeToString([]byte("BlockStored")) + "9107" + "c0" + "9201cd012c" + "02" + "c0" + "a3" + hex.EncodeToString([]byte("GPU")) + "c0" + "02"},
		{engine.KVEvent{Type: engine.BlockRemoved, BlockHashes: []uint64{5}}, true,
			"93cb3ff8000000000000" + "91" + "83a4" + hex.EncodeToString([]byte("type")) + "ac" + hex.EncodeToString([]byte("BlockRemoved")) +
				"ac" + hex.EncodeToString([]byte("block_hashes")) + "9105" + "a6" + hex.EncodeToString([]byte("medium")) + "a3" + hex.EncodeToString([]byte("GPU")) + "02"},
	} {
		b, err := EncodeBatch(engine.KVEventBatch{At: at, Events: []engine.KVEvent{tc.ev}}, 2, tc.maps)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := hex.DecodeString(tc.want)
		if !bytes.Equal(b, want) {
			t.Errorf("%s (maps %v):\n got %x\nwant %x", tc.ev.Type, tc.maps, b, want)
		}
	}
}
