package kvevents

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/eppkit/eppkit/fakes/vllm/engine"
)

// endSeq is the replay socket's end-of-replay marker: -1 as a signed 8-byte big-endian integer
// (vLLM ZmqEventPublisher.END_SEQ).
var endSeq = []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// shutdownTimeout is how long Close waits for queued batches to go out (vLLM's
// SHUTDOWN_TIMEOUT).
const shutdownTimeout = time.Second

// Options are a publisher's identity.
type Options struct {
	// Rank is the data-parallel rank (the engine index): it offsets the ports and is the
	// batches' data_parallel_rank.
	Rank int
	// Host replaces "*" in the endpoints (Config.Endpoint).
	Host string
	// Topic is the first frame of every message (Config.Topic, or the server's default).
	Topic string
	// MapFormat encodes events as maps (EncodeBatch).
	MapFormat bool
	// Logger receives warnings; default slog.Default().
	Logger *slog.Logger
}

// Publisher is one engine's event publisher, vLLM's ZmqEventPublisher: Enqueue takes a batch
// without blocking the engine, a goroutine numbers it (the sequence starts at 0 for every
// publisher, so it restarts with the engine), encodes it (EncodeBatch) and sends the three frames
// [topic, seq as 8 bytes big-endian, payload] on the PUB socket, keeping the last BufferSteps
// (seq, payload) pairs. The replay socket (a ROUTER, when ReplayEndpoint is set) answers a request
// [identity, "", start as 8 bytes big-endian] with one message [identity, "", seq, payload] per
// buffered batch whose seq ≥ start, in order, then [identity, "", END_SEQ (-1), ""]; the router
// strips the identity, so a DEALER reads ["", seq, payload] frames. Requests of another shape are
// logged and ignored (vLLM: "Invalid replay request").
type Publisher struct {
	opts   Options
	log    *slog.Logger
	pub    zmq4.Socket
	replay zmq4.Socket
	topic  []byte
	pubEP  string
	repEP  string

	mu      sync.Mutex
	queue   []engine.KVEventBatch
	dropped uint64
	closed  bool
	maxQ    int
	wake    chan struct{}
	done    chan struct{}

	bufMu   sync.Mutex
	buffer  []record // ring of the last cap(buffer) batches
	next    int      // ring position of the next record
	nextSeq uint64   // sequence number of the next batch sent
}

type record struct {
	seq     uint64
	payload []byte
}

// Start opens the sockets of cfg (which must be Enabled) for opts.Rank and starts publishing.
// The error names the endpoint that could not be bound or dialled.
func Start(cfg Config, opts Options) (*Publisher, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	p := &Publisher{opts: opts, log: opts.Logger, topic: []byte(opts.Topic), maxQ: cfg.MaxQueueSize,
		wake: make(chan struct{}, 1), done: make(chan struct{}),
		buffer: make([]record, 0, cfg.BufferSteps)}
	ep, bind := bindAddress(OffsetEndpoint(cfg.Endpoint, opts.Rank), opts.Host)
	p.pub = zmq4.NewPub(context.Background(), zmq4.WithLogger(slog.NewLogLogger(p.log.Handler(), slog.LevelWarn)))
	if cfg.HWM > 0 {
		if err := p.pub.SetOption(zmq4.OptionHWM, cfg.HWM); err != nil {
			_ = p.pub.Close()
			return nil, fmt.Errorf("kv events: hwm: %w", err)
		}
	}
	if bind {
		if err := p.pub.Listen(ep); err != nil {
			_ = p.pub.Close()
			return nil, fmt.Errorf("kv events: binding endpoint %s: %w", ep, err)
		}
		p.pubEP = "tcp://" + p.pub.Addr().String()
	} else {
		// vLLM connects to a non-wildcard endpoint, where a central subscriber listens; zmq
		// connects in the background, so a subscriber that is not up yet only delays delivery.
		p.pubEP = ep
		go func() {
			if err := p.pub.Dial(ep); err != nil {
				p.log.Warn("kv events: dialling the endpoint failed", "endpoint", ep, "err", err)
			}
		}()
	}
	if cfg.ReplayEndpoint != nil {
		rep, _ := bindAddress(OffsetEndpoint(*cfg.ReplayEndpoint, opts.Rank), opts.Host)
		p.replay = zmq4.NewRouter(context.Background(), zmq4.WithLogger(slog.NewLogLogger(p.log.Handler(), slog.LevelWarn)))
		if err := p.replay.Listen(rep); err != nil {
			_ = p.pub.Close()
			_ = p.replay.Close()
			return nil, fmt.Errorf("kv events: binding replay_endpoint %s: %w", rep, err)
		}
		p.repEP = "tcp://" + p.replay.Addr().String()
		go p.serveReplay()
	}
	go p.run()
	return p, nil
}

// Endpoint is the PUB socket's address: the bound address (port resolved) or the one dialled.
func (p *Publisher) Endpoint() string { return p.pubEP }

// ReplayEndpoint is the replay socket's bound address, "" without replay.
func (p *Publisher) ReplayEndpoint() string { return p.repEP }

// Enqueue queues b for publishing; it never blocks (engine.Config.KVEvents calls it with the
// engine's lock held). A batch beyond MaxQueueSize is dropped, and takes its sequence number with
// it, so subscribers see the gap.
func (p *Publisher) Enqueue(b engine.KVEventBatch) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	if len(p.queue) >= p.maxQ {
		p.dropped++
		p.mu.Unlock()
		p.bufMu.Lock()
		p.nextSeq++
		p.bufMu.Unlock()
		return
	}
	p.queue = append(p.queue, b)
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Sent is the sequence number the next batch will carry: how many batches this publisher has
// numbered since it started.
func (p *Publisher) Sent() uint64 {
	p.bufMu.Lock()
	defer p.bufMu.Unlock()
	return p.nextSeq
}

func (p *Publisher) run() {
	defer close(p.done)
	var batch []engine.KVEventBatch
	for {
		p.mu.Lock()
		batch, p.queue = p.queue, batch[:0]
		closed := p.closed
		p.mu.Unlock()
		for _, b := range batch {
			p.send(b)
		}
		if closed {
			return
		}
		if len(batch) == 0 {
			<-p.wake
		}
	}
}

// send numbers, encodes and sends one batch, and keeps it for replay.
func (p *Publisher) send(b engine.KVEventBatch) {
	payload, err := EncodeBatch(b, p.opts.Rank, p.opts.MapFormat)
	if err != nil {
		p.log.Error("kv events: encoding a batch", "err", err)
		return
	}
	p.bufMu.Lock()
	seq := p.nextSeq
	p.nextSeq++
	if cap(p.buffer) > 0 {
		if len(p.buffer) < cap(p.buffer) {
			p.buffer = append(p.buffer, record{seq, payload})
		} else {
			p.buffer[p.next] = record{seq, payload}
		}
		p.next = (p.next + 1) % cap(p.buffer)
	}
	p.bufMu.Unlock()
	var seqb [8]byte
	binary.BigEndian.PutUint64(seqb[:], seq)
	if err := p.pub.SendMulti(zmq4.NewMsgFrom(p.topic, seqb[:], payload)); err != nil {
		p.log.Warn("kv events: sending a batch", "seq", seq, "err", err)
	}
}

// buffered returns the buffered records with seq ≥ start, in order.
func (p *Publisher) buffered(start uint64) []record {
	p.bufMu.Lock()
	defer p.bufMu.Unlock()
	n := len(p.buffer)
	first := 0 // the oldest record: the start until the ring is full, then the next to overwrite
	if n == cap(p.buffer) {
		first = p.next
	}
	out := make([]record, 0, n)
	for k := range n {
		r := p.buffer[(first+k)%n]
		if r.seq >= start {
			out = append(out, r)
		}
	}
	return out
}

func (p *Publisher) serveReplay() {
	for {
		msg, err := p.replay.Recv()
		if err != nil {
			return // closed
		}
		if len(msg.Frames) != 3 || len(msg.Frames[2]) != 8 {
			p.log.Warn("kv events: invalid replay request, want [identity, empty, 8-byte start sequence]", "frames", len(msg.Frames))
			continue
		}
		id := msg.Frames[0]
		start := binary.BigEndian.Uint64(msg.Frames[2])
		for _, r := range p.buffered(start) {
			var seqb [8]byte
			binary.BigEndian.PutUint64(seqb[:], r.seq)
			if err := p.replay.SendMulti(zmq4.NewMsgFrom(id, nil, seqb[:], r.payload)); err != nil {
				p.log.Warn("kv events: replay send", "err", err)
				break
			}
		}
		if err := p.replay.SendMulti(zmq4.NewMsgFrom(id, nil, endSeq, nil)); err != nil {
			p.log.Warn("kv events: replay end marker", "err", err)
		}
	}
}

// Close sends what is queued (waiting at most a second, as vLLM's shutdown), then closes the
// sockets. It is idempotent.
func (p *Publisher) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
	select {
	case <-p.done:
	case <-time.After(shutdownTimeout):
		p.log.Warn("kv events: batches still queued at shutdown")
	}
	p.mu.Lock()
	dropped := p.dropped
	p.mu.Unlock()
	if dropped > 0 {
		p.log.Warn("kv events: batches dropped on a full queue (max_queue_size)", "dropped", dropped)
	}
	err := p.pub.Close()
	if p.replay != nil {
		if e := p.replay.Close(); err == nil {
			err = e
		}
	}
	return err
}

// Topics returns the topic filters subscribers have set on the PUB socket (sorted, one per
// distinct filter): a subscriber appears here once its subscription reached the publisher, so a
// test can wait for it before sending traffic it must see live.
func (p *Publisher) Topics() []string {
	if t, ok := p.pub.(zmq4.Topics); ok {
		return t.Topics()
	}
	return nil
}
