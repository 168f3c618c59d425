// Package framework is the reference EPP's plugin framework: plugin interfaces and extension
// points, the plugin registry with typed factories, the EndpointPickerConfig loader, cycle state,
// plugin state, the PrepareData dependency graph (DAG) and executor, and the scheduler.
//
// The vocabulary and the order of extension points follow the upstream Gateway API Inference
// Extension EPP (gateway-api-inference-extension, pkg/epp/framework), restated in eppkit's
// SPEC.md §1. Per request the order is:
//
//	PrepareData → Admission → Scheduling (profile handler → filters → scorers → picker)
//	→ PreRequest → ResponseHeader / ResponseBody (per chunk) / ResponseComplete
//
// Nothing in this package keeps global state: every registry, store and clock is a value that is
// passed in, so tests can run many frameworks side by side.
package framework
