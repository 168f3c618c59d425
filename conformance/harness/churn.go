package harness

import "context"

// PoolEditor is implemented by endpoint sources that can take an endpoint out of the pool and put
// it back, as Kubernetes does when a Pod is deleted and created again (the apiserver source:
// Pod deleted / Pod created Ready). Used by EndpointChurn.
type PoolEditor interface {
	// RemoveEndpoint removes addr (ip:port) from the pool (its Pod is deleted).
	RemoveEndpoint(ctx context.Context, addr string) error
	// AddEndpoint adds addr (ip:port) to the pool (a new Ready Pod with its IP).
	AddEndpoint(ctx context.Context, addr string) error
}

// RemoveEndpoint removes a pool member through the endpoint source; ErrUnsupported when the
// source cannot change the pool (static).
func (s *Suite) RemoveEndpoint(ctx context.Context, addr string) error {
	pe, ok := s.source.(PoolEditor)
	if !ok {
		return ErrUnsupported
	}
	return pe.RemoveEndpoint(ctx, addr)
}

// AddEndpoint adds addr to the pool through the endpoint source; ErrUnsupported when the source
// cannot change the pool (static).
func (s *Suite) AddEndpoint(ctx context.Context, addr string) error {
	pe, ok := s.source.(PoolEditor)
	if !ok {
		return ErrUnsupported
	}
	return pe.AddEndpoint(ctx, addr)
}

// CanEditPool reports whether the run's endpoint source implements PoolEditor.
func (s *Suite) CanEditPool() bool {
	_, ok := s.source.(PoolEditor)
	return ok
}
