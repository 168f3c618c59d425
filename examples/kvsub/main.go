// Command kvsub subscribes to a vLLM engine's KV-cache events and prints them, one line per
// event. It is written from vLLM's published schema alone (vllm/distributed/kv_events.py:
// ZmqEventPublisher frames [topic, 8-byte big-endian seq, msgpack KVEventBatch]; KVEventBatch
// [ts, events, data_parallel_rank]; events BlockStored, BlockRemoved, AllBlocksCleared as
// tagged positional arrays or tagged maps) and imports nothing of eppkit: it is how eppkit's
// fake vLLM is checked against a consumer that did not come from the same hands.
//
//	go run . --endpoint tcp://127.0.0.1:5557 [--replay tcp://127.0.0.1:5558] [--batches N]
//
// With --replay it asks the replay socket for every batch from seq 0 first (vLLM's replay
// protocol: a DEALER sends ["", start as 8 bytes]; replies ["", seq, payload] ... then ["",
// -1, ""]), so batches published before it started are printed too. It prints a gap in the
// sequence numbers as "GAP" and exits 1 at the end when it saw one.
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"
)

var fieldNames = map[string][]string{
	"BlockStored":      {"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name", "extra_keys"},
	"BlockRemoved":     {"block_hashes", "medium"},
	"AllBlocksCleared": {},
}

// fields returns an event's tag and its fields by name, from either encoding.
func fields(raw any) (string, map[string]any, error) {
	switch e := raw.(type) {
	case []any:
		if len(e) == 0 {
			return "", nil, fmt.Errorf("empty event")
		}
		tag, _ := e[0].(string)
		names, ok := fieldNames[tag]
		if !ok {
			return "", nil, fmt.Errorf("unknown event tag %v", e[0])
		}
		m := map[string]any{}
		for i, v := range e[1:] {
			if i < len(names) {
				m[names[i]] = v
			}
		}
		return tag, m, nil
	case map[string]any:
		tag, _ := e["type"].(string)
		if _, ok := fieldNames[tag]; !ok {
			return "", nil, fmt.Errorf("unknown event tag %v", e["type"])
		}
		return tag, e, nil
	}
	return "", nil, fmt.Errorf("event is a %T", raw)
}

func count(v any) int {
	l, _ := v.([]any)
	return len(l)
}

func describe(seq uint64, topic string, payload []byte) (string, error) {
	var raw any
	if err := msgpack.Unmarshal(payload, &raw); err != nil {
		return "", err
	}
	batch, ok := raw.([]any)
	if !ok || len(batch) < 2 {
		return "", fmt.Errorf("batch is not [ts, events, rank]")
	}
	events, _ := batch[1].([]any)
	var rank any
	if len(batch) > 2 {
		rank = batch[2]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "seq %d topic %q ts %v rank %v: %d events\n", seq, topic, batch[0], rank, len(events))
	for _, ev := range events {
		tag, f, err := fields(ev)
		if err != nil {
			return "", err
		}
		switch tag {
		case "BlockStored":
			fmt.Fprintf(&b, "  BlockStored  hashes %v parent %v tokens %d block_size %v lora %v/%v medium %v\n",
				f["block_hashes"], f["parent_block_hash"], count(f["token_ids"]), f["block_size"], f["lora_id"], f["lora_name"], f["medium"])
		case "BlockRemoved":
			fmt.Fprintf(&b, "  BlockRemoved hashes %v medium %v\n", f["block_hashes"], f["medium"])
		default:
			fmt.Fprintf(&b, "  %s\n", tag)
		}
	}
	return b.String(), nil
}

func main() {
	endpoint := flag.String("endpoint", "tcp://127.0.0.1:5557", "the engine's PUB address")
	replay := flag.String("replay", "", "the engine's replay (ROUTER) address; empty: no replay")
	topic := flag.String("topic", "", "topic prefix to subscribe to (empty: every topic)")
	batches := flag.Int("batches", 0, "exit after this many batches (0: run until interrupted)")
	timeout := flag.Duration("timeout", 0, "exit after this long (0: no limit)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}
	var next uint64
	seen, gaps := 0, 0
	print := func(seq uint64, topic string, payload []byte) bool {
		if seq < next {
			return false // already printed from the replay
		}
		if seq > next {
			fmt.Printf("GAP: expected seq %d, got %d\n", next, seq)
			gaps++
		}
		next = seq + 1
		s, err := describe(seq, topic, payload)
		if err != nil {
			fmt.Printf("seq %d: undecodable: %v\n", seq, err)
		} else {
			fmt.Print(s)
		}
		seen++
		return *batches > 0 && seen >= *batches
	}
	sub := zmq4.NewSub(ctx)
	defer sub.Close()
	if err := sub.Dial(*endpoint); err != nil {
		fmt.Fprintln(os.Stderr, "dial:", err)
		os.Exit(2)
	}
	if err := sub.SetOption(zmq4.OptionSubscribe, *topic); err != nil {
		fmt.Fprintln(os.Stderr, "subscribe:", err)
		os.Exit(2)
	}
	if *replay != "" {
		time.Sleep(100 * time.Millisecond) // let the subscription reach the publisher first
		d := zmq4.NewDealer(ctx)
		if err := d.Dial(*replay); err != nil {
			fmt.Fprintln(os.Stderr, "replay dial:", err)
			os.Exit(2)
		}
		var start [8]byte
		if err := d.SendMulti(zmq4.NewMsgFrom(nil, start[:])); err != nil {
			fmt.Fprintln(os.Stderr, "replay request:", err)
			os.Exit(2)
		}
		for {
			msg, err := d.Recv()
			if err != nil {
				fmt.Fprintln(os.Stderr, "replay:", err)
				os.Exit(2)
			}
			f := msg.Frames
			if len(f) > 0 && len(f[0]) == 0 {
				f = f[1:]
			}
			if len(f) != 2 || len(f[0]) != 8 || int64(binary.BigEndian.Uint64(f[0])) == -1 {
				break
			}
			if print(binary.BigEndian.Uint64(f[0]), "(replay)", f[1]) {
				d.Close()
				return
			}
		}
		d.Close()
	}
	for {
		msg, err := sub.Recv()
		if err != nil {
			break
		}
		if len(msg.Frames) != 3 || len(msg.Frames[1]) != 8 {
			fmt.Printf("malformed message of %d frames\n", len(msg.Frames))
			continue
		}
		if print(binary.BigEndian.Uint64(msg.Frames[1]), string(msg.Frames[0]), msg.Frames[2]) {
			break
		}
	}
	if gaps > 0 {
		os.Exit(1)
	}
}
