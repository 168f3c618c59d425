package prefix

import "github.com/eppkit/eppkit/reference/framework"

// Register adds approx-prefix-cache-producer and prefix-cache-scorer to reg and names the
// producer the default producer of PrefixCacheMatchInfoKey. It returns the first registration
// error (a type already registered).
func Register(reg *framework.Registry) error {
	if err := reg.Register(ProducerType, ProducerFactory); err != nil {
		return err
	}
	if err := reg.Register(ScorerType, ScorerFactory); err != nil {
		return err
	}
	reg.RegisterDefaultProducer(PrefixCacheMatchInfoKey, ProducerType)
	return nil
}
