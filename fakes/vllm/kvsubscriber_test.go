package vllm

// A KV-event subscriber written from vLLM's schema alone (vllm/distributed/kv_events.py:
// KVEventBatch [ts, events, data_parallel_rank], BlockStored, BlockRemoved, AllBlocksCleared as
// tagged, positional msgspec structs or tagged maps; ZmqEventPublisher's frames [topic, seq,
// payload] and its replay protocol), sharing no code with fakes/vllm/kvevents: it decodes
// generically (msgpack into any) and reads fields by their schema positions or names.

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"
)

// subEvent is one decoded event.
type subEvent struct {
	tag       string
	hashes    []uint64
	parent    *uint64
	tokens    []uint64
	blockSize int64
	loraName  string
	medium    string
}

// subBatch is one decoded message.
type subBatch struct {
	topic  string
	seq    uint64
	ts     float64
	rank   int64
	events []subEvent
}

func asUint(v any) (uint64, error) {
	switch n := v.(type) {
	case int8:
		return uint64(n), nil
	case int16:
		return uint64(n), nil
	case int32:
		return uint64(n), nil
	case int64:
		return uint64(n), nil
	case uint8:
		return uint64(n), nil
	case uint16:
		return uint64(n), nil
	case uint32:
		return uint64(n), nil
	case uint64:
		return n, nil
	}
	return 0, fmt.Errorf("not an integer: %T", v)
}

func asUints(v any) ([]uint64, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("not an array: %T", v)
	}
	out := make([]uint64, len(list))
	for i, x := range list {
		n, err := asUint(x)
		if err != nil {
			return nil, err
		}
		out[i] = n
	}
	return out, nil
}

// schemaFields are the field names of each event class, in declaration order (after the tag).
var schemaFields = map[string][]string{
	"BlockStored":      {"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name", "extra_keys"},
	"BlockRemoved":     {"block_hashes", "medium"},
	"AllBlocksCleared": {},
}

func decodeSubEvent(raw any) (subEvent, error) {
	var ev subEvent
	field := map[string]any{}
	switch e := raw.(type) {
	case []any: // array_like: [tag, fields in order...]
		if len(e) == 0 {
			return ev, fmt.Errorf("empty event")
		}
		ev.tag, _ = e[0].(string)
		names, ok := schemaFields[ev.tag]
		if !ok {
			return ev, fmt.Errorf("unknown tag %v", e[0])
		}
		for i, v := range e[1:] {
			if i < len(names) {
				field[names[i]] = v
			}
		}
	case map[string]any:
		ev.tag, _ = e["type"].(string)
		if _, ok := schemaFields[ev.tag]; !ok {
			return ev, fmt.Errorf("unknown tag %v", e["type"])
		}
		field = e
	default:
		return ev, fmt.Errorf("event is a %T", raw)
	}
	var err error
	if h, ok := field["block_hashes"]; ok {
		if ev.hashes, err = asUints(h); err != nil {
			return ev, fmt.Errorf("block_hashes: %w", err)
		}
	}
	if p := field["parent_block_hash"]; p != nil {
		n, err := asUint(p)
		if err != nil {
			return ev, fmt.Errorf("parent_block_hash: %w", err)
		}
		ev.parent = &n
	}
	if ev.tag == "BlockStored" {
		if ev.tokens, err = asUints(field["token_ids"]); err != nil {
			return ev, fmt.Errorf("token_ids: %w", err)
		}
		bs, err := asUint(field["block_size"])
		if err != nil {
			return ev, fmt.Errorf("block_size: %w", err)
		}
		ev.blockSize = int64(bs)
		ev.loraName, _ = field["lora_name"].(string)
	}
	ev.medium, _ = field["medium"].(string)
	return ev, nil
}

func decodeSubBatch(frames [][]byte) (subBatch, error) {
	var b subBatch
	if len(frames) != 3 || len(frames[1]) != 8 {
		return b, fmt.Errorf("want [topic, 8-byte seq, payload], got %d frames", len(frames))
	}
	b.topic, b.seq = string(frames[0]), binary.BigEndian.Uint64(frames[1])
	var raw any
	if err := msgpack.Unmarshal(frames[2], &raw); err != nil {
		return b, err
	}
	arr, ok := raw.([]any)
	if !ok || len(arr) < 2 {
		return b, fmt.Errorf("batch is not [ts, events, rank]: %T", raw)
	}
	b.ts, _ = arr[0].(float64)
	if len(arr) > 2 {
		r, _ := asUint(arr[2])
		b.rank = int64(r)
	}
	evs, ok := arr[1].([]any)
	if !ok {
		return b, fmt.Errorf("events is a %T", arr[1])
	}
	for _, e := range evs {
		ev, err := decodeSubEvent(e)
		if err != nil {
			return b, err
		}
		b.events = append(b.events, ev)
	}
	return b, nil
}

// testSubscriber follows one publisher as llm-d's subscribers do: a SUB socket, re-dialled when
// it breaks; a gap, or a first message past seq 0, is filled from the replay socket; a seq lower
// than the last one is a restarted publisher, whose index starts over. It keeps the index of
// cached block hashes and checks every event against it as it applies them.
type testSubscriber struct {
	t                *testing.T
	endpoint, replay string
	topicPrefix      string

	mu       sync.Mutex
	next     uint64 // next expected seq
	have     bool
	lastLive uint64 // the last seq received live
	haveLive bool
	index    map[uint64]bool
	applied  []uint64 // seqs applied, in order, of the current publisher life
	lives    int      // publisher lives seen (restarts + 1)
	stored   int
	removed  int
	cleared  int
	errs     []string
	seen     []subBatch
}

func newTestSubscriber(t *testing.T, endpoint, replay, topicPrefix string) *testSubscriber {
	ts := &testSubscriber{t: t, endpoint: endpoint, replay: replay, topicPrefix: topicPrefix, index: map[uint64]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			ts.runOnce(ctx)
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return ts
}

func (ts *testSubscriber) fail(format string, args ...any) {
	ts.errs = append(ts.errs, fmt.Sprintf(format, args...))
}

func (ts *testSubscriber) runOnce(ctx context.Context) {
	sub := zmq4.NewSub(ctx, zmq4.WithDialerRetry(20*time.Millisecond), zmq4.WithDialerMaxRetries(5))
	defer sub.Close()
	if err := sub.Dial(ts.endpoint); err != nil {
		return
	}
	if err := sub.SetOption(zmq4.OptionSubscribe, ts.topicPrefix); err != nil {
		ts.mu.Lock()
		ts.fail("subscribe: %v", err)
		ts.mu.Unlock()
		return
	}
	for {
		msg, err := sub.Recv()
		if err != nil {
			return
		}
		b, err := decodeSubBatch(msg.Frames)
		ts.mu.Lock()
		if err != nil {
			ts.fail("live message: %v", err)
		} else {
			ts.onLive(ctx, b)
		}
		ts.mu.Unlock()
	}
}

// onLive handles one live batch (ts.mu held).
func (ts *testSubscriber) onLive(ctx context.Context, b subBatch) {
	if ts.haveLive && b.seq < ts.lastLive {
		// The live sequence went back: the publisher restarted (a new engine, an empty cache,
		// numbering from 0 again), as llm-d's subscriber detects it.
		ts.have, ts.next = false, 0
		clear(ts.index)
		ts.applied = nil
	}
	ts.lastLive, ts.haveLive = b.seq, true
	if ts.have && b.seq < ts.next {
		return // already applied through a replay
	}
	if b.seq > ts.next {
		ts.replayFrom(ctx, ts.next) // joined late or missed some: fill from the replay socket
	}
	if b.seq == ts.next {
		ts.apply(b)
	} else if b.seq > ts.next {
		ts.fail("gap: have %d, got %d after a replay", ts.next, b.seq)
	}
}

// replayFrom fills ts from the replay socket, from seq start (ts.mu held).
func (ts *testSubscriber) replayFrom(ctx context.Context, start uint64) {
	if ts.replay == "" {
		ts.fail("gap at %d and no replay socket", start)
		return
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	d := zmq4.NewDealer(rctx)
	defer d.Close()
	if err := d.Dial(ts.replay); err != nil {
		ts.fail("replay dial: %v", err)
		return
	}
	var seqb [8]byte
	binary.BigEndian.PutUint64(seqb[:], start)
	if err := d.SendMulti(zmq4.NewMsgFrom(nil, seqb[:])); err != nil {
		ts.fail("replay request: %v", err)
		return
	}
	for {
		msg, err := d.Recv()
		if err != nil {
			ts.fail("replay recv: %v", err)
			return
		}
		f := msg.Frames
		if len(f) > 0 && len(f[0]) == 0 {
			f = f[1:]
		}
		if len(f) != 2 || len(f[0]) != 8 {
			ts.fail("replay frame of %d parts", len(f))
			return
		}
		if int64(binary.BigEndian.Uint64(f[0])) == -1 {
			return // END_SEQ
		}
		b, err := decodeSubBatch([][]byte{[]byte("replay"), f[0], f[1]})
		if err != nil {
			ts.fail("replayed batch: %v", err)
			return
		}
		if b.seq == ts.next {
			ts.apply(b)
		} else if b.seq > ts.next {
			ts.fail("replay skipped from %d to %d", ts.next, b.seq)
			return
		}
	}
}

// apply checks b's events against the index and applies them (ts.mu held).
func (ts *testSubscriber) apply(b subBatch) {
	if !ts.have {
		ts.lives++
	}
	ts.have = true
	ts.next = b.seq + 1
	ts.applied = append(ts.applied, b.seq)
	ts.seen = append(ts.seen, b)
	for _, ev := range b.events {
		switch ev.tag {
		case "BlockStored":
			if ev.parent != nil && !ts.index[*ev.parent] {
				ts.fail("seq %d: stored blocks whose parent %x was never stored", b.seq, *ev.parent)
			}
			if int64(len(ev.tokens)) != int64(len(ev.hashes))*ev.blockSize || ev.medium != "GPU" {
				ts.fail("seq %d: %d blocks with %d tokens of block size %d, medium %q", b.seq, len(ev.hashes), len(ev.tokens), ev.blockSize, ev.medium)
			}
			for _, h := range ev.hashes {
				ts.index[h] = true
			}
			ts.stored += len(ev.hashes)
		case "BlockRemoved":
			for _, h := range ev.hashes {
				if !ts.index[h] {
					ts.fail("seq %d: removed %x, which is not stored", b.seq, h)
				}
				delete(ts.index, h)
			}
			ts.removed += len(ev.hashes)
		case "AllBlocksCleared":
			clear(ts.index)
			ts.cleared++
		}
	}
}

// snapshot returns a copy of the index and the state.
func (ts *testSubscriber) snapshot() (index map[uint64]bool, next uint64, errs []string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	index = make(map[uint64]bool, len(ts.index))
	for k := range ts.index {
		index[k] = true
	}
	return index, ts.next, append([]string(nil), ts.errs...)
}

func (ts *testSubscriber) String() string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return fmt.Sprintf("next %d, %d blocks cached, stored %d removed %d cleared %d, lives %d, errors: %s",
		ts.next, len(ts.index), ts.stored, ts.removed, ts.cleared, ts.lives, strings.Join(ts.errs, "; "))
}
