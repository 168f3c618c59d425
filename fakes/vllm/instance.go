package vllm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
)

// Instance is one running fake vLLM server: its data-parallel ranks, each serving on its own
// port (rank i on Port+i), or with DataParallelInternal the one server in front of every engine.
type Instance struct {
	// Ranks are the servers in rank order.
	Ranks []*Server
	wg    sync.WaitGroup
	errMu sync.Mutex
	err   error
}

// Start validates cfg, listens on Host:Port+i for every rank i (Host:Port only with
// DataParallelInternal) and serves in the background.
// Port 0 picks a free port for rank 0 and the following ports for later ranks; when one of those
// is taken (another process may hold any port next to a free one), it lets every listener go and
// tries another rank-0 port, up to 20 times. It returns an error naming the address when a port
// is taken (with Port 0, when every try met a taken port).
func Start(cfg Config, opts Options) (*Instance, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	tries := 1
	if cfg.Port == 0 && cfg.DPSize > 1 && cfg.DataParallelMode != DataParallelInternal {
		tries = 20
	}
	var inst *Instance
	var err error
	for try := 0; try < tries; try++ {
		if inst, err = listenRanks(cfg, opts); err == nil {
			break
		}
		if !errors.Is(err, errPortTaken) {
			return nil, err
		}
	}
	if err != nil {
		return nil, err
	}
	for _, s := range inst.Ranks {
		inst.wg.Add(1)
		go func() {
			defer inst.wg.Done()
			if err := s.Serve(); err != nil {
				inst.errMu.Lock()
				inst.err = errors.Join(inst.err, fmt.Errorf("rank %d: %w", s.rank, err))
				inst.errMu.Unlock()
			}
		}()
	}
	return inst, nil
}

// listen is net.Listen; a test replaces it to make a rank's port taken.
var listen = net.Listen

// errPortTaken marks a listen failure of a rank after rank 0 when the ports were picked (Port 0).
var errPortTaken = errors.New("port taken")

// listenRanks listens for every rank and builds its server, without serving. On error every
// listener opened so far is closed.
func listenRanks(cfg Config, opts Options) (*Instance, error) {
	inst := &Instance{}
	servers := cfg.DPSize
	if cfg.DataParallelMode == DataParallelInternal {
		servers = 1 // one API server in front of every engine
	}
	for rank := 0; rank < servers; rank++ {
		port := cfg.Port + rank
		if cfg.Port == 0 && rank > 0 {
			port = inst.Ranks[0].ln.Addr().(*net.TCPAddr).Port + rank
		}
		addr := net.JoinHostPort(cfg.Host, strconv.Itoa(port))
		ln, err := listen("tcp", addr)
		if err != nil {
			inst.Close()
			err = fmt.Errorf("rank %d: listen %s: %w", rank, addr, err)
			if cfg.Port == 0 && rank > 0 {
				err = fmt.Errorf("%w: %w", errPortTaken, err)
			}
			return nil, err
		}
		s, err := NewServer(cfg, rank, ln, opts)
		if err != nil {
			_ = ln.Close()
			inst.Close()
			return nil, fmt.Errorf("rank %d: %w", rank, err)
		}
		inst.Ranks = append(inst.Ranks, s)
	}
	return inst, nil
}

// URL is rank 0's base URL.
func (i *Instance) URL() string { return i.Ranks[0].URL() }

// Shutdown stops every rank gracefully (open requests may finish until ctx ends) and waits for
// the serve loops; it returns the first serving error, if any.
func (i *Instance) Shutdown(ctx context.Context) error {
	var errs []error
	for _, s := range i.Ranks {
		if err := s.Shutdown(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	i.wg.Wait()
	i.errMu.Lock()
	defer i.errMu.Unlock()
	return errors.Join(append(errs, i.err)...)
}

// Close stops every rank at once, dropping open connections, and waits for the serve loops.
func (i *Instance) Close() {
	for _, s := range i.Ranks {
		_ = s.Close()
	}
	i.wg.Wait()
}

// Done is closed when every rank has stopped serving.
func (i *Instance) Done() <-chan struct{} {
	ch := make(chan struct{})
	go func() { i.wg.Wait(); close(ch) }()
	return ch
}
