package tokenload

import "github.com/eppkit/eppkit/reference/framework"

// Register adds inflight-load-producer, token-load-scorer, active-request-scorer and
// prefix-cache-affinity-filter to reg and names inflight-load-producer the default producer of
// InFlightLoadKey and UncachedRequestTokensKey (upstream: the default producer of
// InFlightLoadDataKey), so a config with only a token-load or active-request scorer gets one.
func Register(reg *framework.Registry) error {
	for _, r := range []struct {
		typ string
		f   framework.FactoryFunc
	}{
		{ProducerType, producerFactory},
		{TokenLoadScorerType, tokenLoadFactory},
		{ActiveRequestType, activeRequestFactory},
		{AffinityFilterType, affinityFilterFactory},
	} {
		if err := reg.Register(r.typ, r.f); err != nil {
			return err
		}
	}
	reg.RegisterDefaultProducer(InFlightLoadKey, ProducerType)
	reg.RegisterDefaultProducer(UncachedRequestTokensKey, ProducerType)
	return nil
}
