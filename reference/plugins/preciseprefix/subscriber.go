package preciseprefix

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"
	"k8s.io/utils/clock"
)

// Timings of a subscriber.
const (
	// retryInterval is the wait before a subscriber dials again after its socket failed (llm-d
	// router kvevents retryInterval is 1 s; shorter here, so a restarted engine is followed
	// within a conformance test's bounds).
	retryInterval = 250 * time.Millisecond
	// replayTimeout bounds one replay exchange.
	replayTimeout = 5 * time.Second
	// subscriptionDelay is how long after subscribing the subscriber asks the replay socket for
	// the engine's buffered batches.
	subscriptionDelay = 200 * time.Millisecond
)

// subscriber follows one endpoint's KV events (package doc) and applies them to the index.
type subscriber struct {
	ep             string // the endpoint's key, ip:port
	endpoint       string // tcp://ip:socketPort(+rank)
	replay         string // tcp://ip:replayPort(+rank), "" without replay
	topicFilter    string
	seed           string
	index          *Index
	log            *slog.Logger
	clk            clock.Clock
	cancel         context.CancelFunc
	done           chan struct{}
	next, lastLive uint64
	have, haveLive bool
	buf            []byte
}

func (s *subscriber) run(ctx context.Context) {
	defer close(s.done)
	for ctx.Err() == nil {
		s.runOnce(ctx)
		select {
		case <-ctx.Done():
		case <-s.clk.After(retryInterval):
		}
	}
}

func (s *subscriber) runOnce(ctx context.Context) {
	sub := zmq4.NewSub(ctx, zmq4.WithDialerMaxRetries(0), zmq4.WithLogger(slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)))
	defer sub.Close()
	if err := sub.Dial(s.endpoint); err != nil {
		s.log.Debug("kv events: dial failed", "endpoint", s.endpoint, "err", err)
		return
	}
	if err := sub.SetOption(zmq4.OptionSubscribe, s.topicFilter); err != nil {
		s.log.Warn("kv events: subscribe failed", "endpoint", s.endpoint, "err", err)
		return
	}
	msgs := make(chan zmq4.Msg, 64)
	go func() {
		defer close(msgs)
		for {
			msg, err := sub.Recv()
			if err != nil {
				return
			}
			select {
			case msgs <- msg:
			case <-ctx.Done():
				return
			}
		}
	}()
	// Rebuild from the engine's buffer without waiting for traffic, once the subscription has
	// had time to reach the publisher: a batch sent before that is in the buffer, one sent after
	// arrives live (ZMQ drops what a PUB socket sends before the subscription arrives).
	var proactive <-chan time.Time
	if s.replay != "" && !s.have {
		proactive = s.clk.After(subscriptionDelay)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-proactive:
			proactive = nil
			if !s.have {
				s.replayFrom(ctx, 0)
			}
		case msg, ok := <-msgs:
			if !ok {
				return
			}
			if len(msg.Frames) != 3 || len(msg.Frames[1]) != 8 {
				s.log.Debug("kv events: malformed message", "endpoint", s.endpoint, "frames", len(msg.Frames))
				continue
			}
			s.onLive(ctx, binary.BigEndian.Uint64(msg.Frames[1]), msg.Frames[2])
		}
	}
}

// onLive applies one live batch in sequence order (llm-d-router kvevents zmq_subscriber.go's
// rules): a sequence lower than the last live one is a restarted engine; a gap is filled from
// the replay socket when there is one.
func (s *subscriber) onLive(ctx context.Context, seq uint64, payload []byte) {
	if s.haveLive && seq < s.lastLive {
		s.log.Info("kv events: sequence went back, the engine restarted; clearing its blocks", "endpoint", s.endpoint,
			"last", s.lastLive, "seq", seq)
		s.index.Clear(s.ep)
		s.have, s.next = false, 0
		if s.replay != "" {
			s.replayFrom(ctx, 0)
		}
	}
	s.lastLive, s.haveLive = seq, true
	if s.have && seq < s.next {
		return // applied from a replay
	}
	if s.replay != "" && (seq > s.next || !s.have && seq > 0) {
		s.replayFrom(ctx, s.next)
		if s.have && seq < s.next {
			return
		}
	}
	s.apply(seq, payload)
}

// replayFrom asks the replay socket for every buffered batch from start and applies them.
func (s *subscriber) replayFrom(ctx context.Context, start uint64) {
	rctx, cancel := context.WithTimeout(ctx, replayTimeout)
	defer cancel()
	d := zmq4.NewDealer(rctx, zmq4.WithDialerMaxRetries(0), zmq4.WithLogger(slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)))
	defer d.Close()
	if err := d.Dial(s.replay); err != nil {
		s.log.Debug("kv events: replay dial failed", "replay", s.replay, "err", err)
		return
	}
	var seqb [8]byte
	binary.BigEndian.PutUint64(seqb[:], start)
	if err := d.SendMulti(zmq4.NewMsgFrom(nil, seqb[:])); err != nil {
		return
	}
	for {
		msg, err := d.Recv()
		if err != nil {
			return
		}
		f := msg.Frames
		if len(f) > 0 && len(f[0]) == 0 {
			f = f[1:]
		}
		if len(f) != 2 || len(f[0]) != 8 {
			return
		}
		seq := binary.BigEndian.Uint64(f[0])
		if int64(seq) == -1 {
			return // END_SEQ
		}
		if s.have && seq < s.next {
			continue
		}
		s.apply(seq, f[1])
	}
}

// apply decodes one batch and applies its events in order.
func (s *subscriber) apply(seq uint64, payload []byte) {
	s.have, s.next = true, seq+1
	events, err := decodeBatch(payload)
	if err != nil {
		s.log.Warn("kv events: undecodable batch", "endpoint", s.endpoint, "seq", seq, "err", err)
		return
	}
	for _, ev := range events {
		switch ev.tag {
		case "BlockStored":
			s.store(ev)
		case "BlockRemoved":
			s.index.Remove(s.ep, ev.hashes)
		case "AllBlocksCleared":
			s.index.Clear(s.ep)
		}
	}
}

// store keys a BlockStored event's blocks from its tokens (package doc) and records them.
func (s *subscriber) store(ev event) {
	var parent uint64
	if ev.hasParent {
		k, ok := s.index.ParentKey(s.ep, ev.parent)
		if !ok {
			s.log.Debug("kv events: stored blocks whose parent is unknown; skipped", "endpoint", s.endpoint)
			return
		}
		parent = k
	} else {
		if ev.loraName != "" {
			s.index.NoteAdapter(ev.loraName)
		}
		parent, s.buf = rootKey(s.seed, ev.loraName, ev.salt, s.buf)
	}
	if ev.blockSize <= 0 {
		return
	}
	keys, buf := appendKeys(make([]uint64, 0, len(ev.hashes)), parent, ev.tokens, ev.blockSize, s.buf)
	s.buf = buf
	n := min(len(keys), len(ev.hashes))
	s.index.Store(s.ep, ev.hashes[:n], keys[:n])
}

// event is one decoded KV event.
type event struct {
	tag       string
	hashes    []uint64
	parent    uint64
	hasParent bool
	tokens    []uint32
	blockSize int
	loraName  string
	salt      string
}

// storedFields and removedFields are the schema's field order (vllm/distributed/kv_events.py).
var (
	storedFields  = []string{"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name", "extra_keys"}
	removedFields = []string{"block_hashes", "medium"}
)

// decodeBatch decodes a KVEventBatch [ts, [event...], rank]; events are tagged positional arrays
// or tagged maps ({"type": tag, ...}).
func decodeBatch(payload []byte) ([]event, error) {
	var raw any
	if err := msgpack.Unmarshal(payload, &raw); err != nil {
		return nil, err
	}
	batch, ok := raw.([]any)
	if !ok || len(batch) < 2 {
		return nil, errors.New("batch is not [ts, events, ...]")
	}
	list, ok := batch[1].([]any)
	if !ok {
		return nil, fmt.Errorf("events is a %T", batch[1])
	}
	out := make([]event, 0, len(list))
	for i, r := range list {
		ev, err := decodeEvent(r)
		if err != nil {
			return nil, fmt.Errorf("event %d: %w", i, err)
		}
		out = append(out, ev)
	}
	return out, nil
}

func decodeEvent(raw any) (event, error) {
	var ev event
	f := map[string]any{}
	switch e := raw.(type) {
	case []any:
		if len(e) == 0 {
			return ev, errors.New("empty event")
		}
		ev.tag, _ = e[0].(string)
		var names []string
		switch ev.tag {
		case "BlockStored":
			names = storedFields
		case "BlockRemoved":
			names = removedFields
		}
		for i, v := range e[1:] {
			if i < len(names) {
				f[names[i]] = v
			}
		}
	case map[string]any:
		ev.tag, _ = e["type"].(string)
		f = e
	default:
		return ev, fmt.Errorf("event is a %T", raw)
	}
	var err error
	switch ev.tag {
	case "BlockStored":
		if ev.hashes, err = uints(f["block_hashes"]); err != nil {
			return ev, fmt.Errorf("block_hashes: %w", err)
		}
		if p := f["parent_block_hash"]; p != nil {
			if ev.parent, err = hashOf(p); err != nil {
				return ev, fmt.Errorf("parent_block_hash: %w", err)
			}
			ev.hasParent = true
		}
		toks, err := uints(f["token_ids"])
		if err != nil {
			return ev, fmt.Errorf("token_ids: %w", err)
		}
		ev.tokens = make([]uint32, len(toks))
		for i, t := range toks {
			ev.tokens[i] = uint32(t)
		}
		bs, err := uintOf(f["block_size"])
		if err != nil {
			return ev, fmt.Errorf("block_size: %w", err)
		}
		ev.blockSize = int(bs)
		ev.loraName, _ = f["lora_name"].(string)
		if extra, ok := f["extra_keys"].([]any); ok && len(extra) > 0 && !ev.hasParent {
			if first, ok := extra[0].([]any); ok && len(first) > 0 {
				// The first block's keys: the LoRA name (when there is one), then the salt.
				if last, ok := first[len(first)-1].(string); ok && !(len(first) == 1 && last == ev.loraName) {
					ev.salt = last
				}
			}
		}
	case "BlockRemoved":
		if ev.hashes, err = uints(f["block_hashes"]); err != nil {
			return ev, fmt.Errorf("block_hashes: %w", err)
		}
	case "AllBlocksCleared":
	default:
		return ev, fmt.Errorf("unknown event tag %q", ev.tag)
	}
	return ev, nil
}

func uintOf(v any) (uint64, error) {
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

// hashOf reads a block hash: an integer, or bytes (vLLM with VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES
// off), whose last 8 bytes are taken big-endian as vLLM converts them.
func hashOf(v any) (uint64, error) {
	if b, ok := v.([]byte); ok {
		if len(b) == 0 {
			return 0, errors.New("empty hash")
		}
		var p [8]byte
		copy(p[max(0, 8-len(b)):], b[max(0, len(b)-8):])
		return binary.BigEndian.Uint64(p[:]), nil
	}
	return uintOf(v)
}

func uints(v any) ([]uint64, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("not an array: %T", v)
	}
	out := make([]uint64, len(list))
	for i, x := range list {
		n, err := hashOf(x)
		if err != nil {
			return nil, fmt.Errorf("[%d]: %w", i, err)
		}
		out[i] = n
	}
	return out, nil
}
