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
// port (rank i on Port+i).
type Instance struct {
	// Ranks are the servers in rank order.
	Ranks []*Server
	wg    sync.WaitGroup
	errMu sync.Mutex
	err   error
}

// Start validates cfg, listens on Host:Port+i for every rank i and serves in the background.
// Port 0 picks a free port for rank 0; later ranks use the following ports. It returns an error
// naming the address when a port is taken.
func Start(cfg Config, opts Options) (*Instance, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	inst := &Instance{}
	base := cfg.Port
	for rank := 0; rank < cfg.DPSize; rank++ {
		port := base + rank
		if base == 0 && rank > 0 {
			port = inst.Ranks[0].ln.Addr().(*net.TCPAddr).Port + rank
		}
		addr := net.JoinHostPort(cfg.Host, strconv.Itoa(port))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			inst.Close()
			return nil, fmt.Errorf("rank %d: listen %s: %w", rank, addr, err)
		}
		s, err := NewServer(cfg, rank, ln, opts)
		if err != nil {
			_ = ln.Close()
			inst.Close()
			return nil, fmt.Errorf("rank %d: %w", rank, err)
		}
		inst.Ranks = append(inst.Ranks, s)
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
