package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	ctrlleader "sigs.k8s.io/controller-runtime/pkg/leaderelection"
	ctrlrecorder "sigs.k8s.io/controller-runtime/pkg/recorder"
)

// Leader election timings: controller-runtime's manager defaults (sigs.k8s.io/controller-runtime
// v0.25 pkg/manager/manager.go defaultLeaseDuration, defaultRenewDeadline, defaultRetryPeriod),
// which llm-d-router v0.10.0 keeps (pkg/epp/server/controller_manager.go NewDefaultManager sets
// none of them).
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// LeaseName is the name of the Lease the replicas of the EPP of one InferencePool elect their
// leader with: "epp-<namespace>-<pool>.llm-d.ai", in the pool's namespace — llm-d-router
// v0.10.0's LeaderElectionID (pkg/epp/server/controller_manager.go NewDefaultManager), so the
// reference and upstream name the lease of a pool alike.
func LeaseName(namespace, pool string) string {
	return fmt.Sprintf("epp-%s-%s.llm-d.ai", namespace, pool)
}

// ElectionConfig configures a LeaderElection.
type ElectionConfig struct {
	// RestConfig reaches the API server. Required.
	RestConfig *rest.Config
	// Namespace and Pool name the InferencePool; the Lease is LeaseName(Namespace, Pool) in
	// Namespace. Required.
	Namespace, Pool string
	// LeaseDuration, RenewDeadline and RetryPeriod are client-go's leader election timings;
	// zero takes the Default* values.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Logger receives leadership changes; nil discards.
	Logger *slog.Logger
}

// LeaderElection is the reference EPP's leader election among the replicas of one pool's EPP
// (SPEC: GIE proposal 004 as of v1.6.2, Health Checking: readiness is SERVING only on "the elected
// leader"): controller-runtime's Lease lock (pkg/leaderelection NewResourceLock, the lock its
// manager uses, resource lock "leases") driven by client-go's LeaderElector, released on cancel
// (LeaderElectionReleaseOnCancel, as llm-d-router v0.10.0 sets it), so a replica that shuts down
// hands the lease over at once instead of after LeaseDuration. A replica that loses the lease
// (a renewal failed) becomes a follower and campaigns again; nothing else changes, since the
// reference has no leader-only work: every replica discovers and keeps its datastore warm
// (upstream's haPopulateNonLeaderDatastore, default on), only readiness differs.
type LeaderElection struct {
	cfg      ElectionConfig
	log      *slog.Logger
	elector  *leaderelection.LeaderElector
	identity string
	mu       sync.Mutex // orders the leadership callbacks
	leader   atomic.Bool
	started  atomic.Bool
	done     chan struct{}
}

// NewLeaderElection validates cfg and builds the lock; nothing is contacted before Run.
func NewLeaderElection(cfg ElectionConfig) (*LeaderElection, error) {
	if cfg.RestConfig == nil {
		return nil, errors.New("leader election: RestConfig is required")
	}
	if cfg.Namespace == "" || cfg.Pool == "" {
		return nil, errors.New("leader election: the pool's namespace and name are required")
	}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = DefaultLeaseDuration
	}
	if cfg.RenewDeadline == 0 {
		cfg.RenewDeadline = DefaultRenewDeadline
	}
	if cfg.RetryPeriod == 0 {
		cfg.RetryPeriod = DefaultRetryPeriod
	}
	if !(cfg.LeaseDuration > cfg.RenewDeadline && cfg.RenewDeadline > cfg.RetryPeriod && cfg.RetryPeriod > 0) {
		return nil, fmt.Errorf("leader election: want lease duration > renew deadline > retry period > 0, got %v, %v, %v",
			cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	} else {
		// client-go's leader election logs through klog: into the EPP's JSON log, once.
		klogOnce.Do(func() { klog.SetLogger(logr.FromSlogHandler(log.With("component", "leaderelection").Handler())) })
	}
	lock, err := ctrlleader.NewResourceLock(cfg.RestConfig, noEvents{}, ctrlleader.Options{
		LeaderElection: true, LeaderElectionResourceLock: "leases",
		LeaderElectionNamespace: cfg.Namespace, LeaderElectionID: LeaseName(cfg.Namespace, cfg.Pool),
		RenewDeadline: cfg.RenewDeadline,
	})
	if err != nil {
		return nil, fmt.Errorf("leader election: lease lock: %w", err)
	}
	le := &LeaderElection{cfg: cfg, identity: lock.Identity(), done: make(chan struct{}),
		log: log.With("lease", cfg.Namespace+"/"+LeaseName(cfg.Namespace, cfg.Pool), "identity", lock.Identity())}
	le.elector, err = leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: cfg.LeaseDuration, RenewDeadline: cfg.RenewDeadline, RetryPeriod: cfg.RetryPeriod,
		ReleaseOnCancel: true, Name: LeaseName(cfg.Namespace, cfg.Pool),
		Callbacks: leaderelection.LeaderCallbacks{
			// client-go calls OnStartedLeading on a goroutine of its own, with a context that ends
			// when leadership does; the mutex and the check keep a late call from marking a replica
			// leader after Run has returned.
			OnStartedLeading: func(ctx context.Context) {
				le.mu.Lock()
				defer le.mu.Unlock()
				if ctx.Err() == nil {
					le.leader.Store(true)
					le.log.Info("leader election: this replica is the leader")
				}
			},
			OnStoppedLeading: le.stopped,
			OnNewLeader: func(id string) {
				if id != le.identity {
					le.log.Info("leader election: following", "leader", id)
				}
			},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("leader election: %w", err)
	}
	return le, nil
}

// Start campaigns in the background until ctx ends; when ctx ends a leader releases the lease
// before Done is closed. A second call is an error.
func (le *LeaderElection) Start(ctx context.Context) error {
	if !le.started.CompareAndSwap(false, true) {
		return errors.New("leader election: already started")
	}
	go func() {
		defer close(le.done)
		for ctx.Err() == nil {
			le.elector.Run(ctx) // returns when leadership is lost or ctx ends (the lease released)
			le.stopped()
			if ctx.Err() == nil {
				le.log.Warn("leader election: lease lost; campaigning again")
			}
		}
	}()
	return nil
}

func (le *LeaderElection) stopped() {
	le.mu.Lock()
	defer le.mu.Unlock()
	if le.leader.Swap(false) {
		le.log.Info("leader election: this replica is no longer the leader")
	}
}

// IsLeader reports whether this replica holds the lease now.
func (le *LeaderElection) IsLeader() bool { return le.leader.Load() }

// Identity is this replica's holder identity in the Lease (hostname_uuid, as controller-runtime).
func (le *LeaderElection) Identity() string { return le.identity }

// Done is closed once Start's campaign has ended (after ctx ended and a held lease was released).
func (le *LeaderElection) Done() <-chan struct{} { return le.done }

var klogOnce sync.Once

// noEvents is a recorder.Provider without recorders: the lock records no Events (client-go's
// LeaseLock skips a nil recorder), so a replica needs no RBAC on events.
type noEvents struct{}

func (noEvents) GetEventRecorderFor(string) record.EventRecorder    { return nil }
func (noEvents) GetEventRecorder(string) ctrlrecorder.EventRecorder { return nil }
