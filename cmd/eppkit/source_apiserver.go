package main

import (
	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/apiserver"
)

// The "apiserver" endpoint source (a real kube-apiserver + etcd from the tools cache holding an
// InferencePool and Ready Pods) is registered here because conformance/ cannot import its own
// subpackage's dependencies without a cycle. It creates the conformance InferenceObjectives
// (conformance.Objectives) with the pool.
func init() {
	conformance.RegisterEndpointSource("apiserver", func() (conformance.EndpointSource, error) {
		return apiserver.NewSource(apiserver.Options{Objectives: conformance.Objectives()}), nil
	})
}
