// Package plugins assembles the reference EPP's plugin set.
package plugins

import (
	"github.com/eppkit/eppkit/reference/flowcontrol"
	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins/filters"
	"github.com/eppkit/eppkit/reference/plugins/latency"
	"github.com/eppkit/eppkit/reference/plugins/legacyprefix"
	"github.com/eppkit/eppkit/reference/plugins/pickers"
	"github.com/eppkit/eppkit/reference/plugins/preciseprefix"
	"github.com/eppkit/eppkit/reference/plugins/prefix"
	"github.com/eppkit/eppkit/reference/plugins/profiles"
	"github.com/eppkit/eppkit/reference/plugins/scorers"
	"github.com/eppkit/eppkit/reference/plugins/session"
	"github.com/eppkit/eppkit/reference/plugins/tokenload"
)

// RegisterAll registers every reference plugin type in reg and the default producers of
// prefix.PrefixCacheMatchInfoKey (approx-prefix-cache-producer) and
// latency.LatencyPredictionInfoKey (predicted-latency-producer, whose predictor comes from
// latency.DefaultPredictorFactory):
//
//	approx-prefix-cache-producer, prefix-cache-scorer              (plugins/prefix)
//	queue-scorer, running-requests-size-scorer,
//	kv-cache-utilization-scorer, lora-affinity-scorer              (plugins/scorers)
//	header-based-testing-filter, lora-affinity-filter              (plugins/filters)
//	max-score-picker, random-picker, weighted-random-picker        (plugins/pickers)
//	single-profile-handler, latency-fallback-profile-handler,
//	disagg-profile-handler                                         (plugins/profiles)
//	predicted-latency-producer, slo-headroom-tier-filter,
//	latency-scorer, latency-slo-admitter                           (plugins/latency)
//	inflight-load-producer, token-load-scorer,
//	active-request-scorer, prefix-cache-affinity-filter            (plugins/tokenload)
//	legacy-prefix-cache-scorer                                     (plugins/legacyprefix)
//	precise-prefix-cache-producer                                  (plugins/preciseprefix)
//	session-affinity-filter, session-affinity-scorer               (plugins/session)
//	utilization-detector, concurrency-detector                     (flowcontrol)
//
// It panics when a type is already registered in reg: that is a programming error (register
// into a fresh framework.NewRegistry()), never a consequence of user input.
func RegisterAll(reg *framework.Registry) {
	RegisterAllWithPredictor(reg, latency.DefaultPredictorFactory)
}

// RegisterAllWithPredictor is RegisterAll with the predictor factory of predicted-latency
// producers chosen by the caller (for example latency.SidecarPredictorFactory for
// `reference-epp --predictor-url`).
func RegisterAllWithPredictor(reg *framework.Registry, newPredictor latency.PredictorFactory) {
	for _, register := range []func(*framework.Registry) error{
		prefix.Register,
		scorers.Register,
		filters.Register,
		pickers.Register,
		profiles.Register,
		session.Register,
		flowcontrol.Register,
		func(r *framework.Registry) error { return latency.Register(r, newPredictor) },
		preciseprefix.Register,
		tokenload.Register,
	} {
		if err := register(reg); err != nil {
			panic(err)
		}
	}
	legacyprefix.Register(reg)
}
