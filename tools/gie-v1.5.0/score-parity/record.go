package main

import (
	"encoding/json"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/types"
	ufw "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/tools/prefixtrace"
)

// recorder writes a score trace (-record; format: tools/prefixtrace) that another GIE version
// replays in a module of its own (tools/llmd-v0.7.1/prefix-replay, GIE v1.4.0 as
// llm-d-inference-scheduler v0.7.1 runs it); nil records nothing.
type recorder struct {
	w   io.WriteCloser
	enc *json.Encoder
	err error
}

func newRecorder(w io.WriteCloser) *recorder { return &recorder{w: w, enc: json.NewEncoder(w)} }

// close closes the trace file and returns the first write or close error.
func (r *recorder) close() error {
	if err := r.w.Close(); r.err == nil {
		r.err = err
	}
	return r.err
}

func (r *recorder) write(l prefixtrace.Line) {
	if r == nil || r.err != nil {
		return
	}
	r.err = r.enc.Encode(l)
}

func (r *recorder) config(seed int64, sh shape) {
	if r == nil {
		return
	}
	b, err := json.Marshal(sh)
	if err != nil {
		r.err = err
		return
	}
	r.write(prefixtrace.Line{Op: prefixtrace.OpConfig, Seed: seed, Shape: b, Params: sh.raw()})
}

func (r *recorder) leave(nn types.NamespacedName) {
	r.write(prefixtrace.Line{Op: prefixtrace.OpLeave, Leave: &prefixtrace.Endpoint{Namespace: nn.Namespace, Name: nn.Name}})
}

// request records one request after upstream scored it; ups are the upstream candidates as
// given to PrepareRequestData, uscores the scorer's result.
func (r *recorder) request(req *framework.LLMRequest, summary string, ups []ufw.Endpoint, uscores map[ufw.Endpoint]float64, pick int) {
	if r == nil {
		return
	}
	path, body, err := wireBody(req)
	if err != nil {
		r.err = err
		return
	}
	l := prefixtrace.Line{Op: prefixtrace.OpRequest, RequestID: req.RequestID, Summary: summary, Model: req.TargetModel, Path: path, Body: body, Pick: &pick}
	for _, e := range ups {
		md, m := e.GetMetadata(), e.GetMetrics()
		port := 0
		_, _ = fmt.Sscan(md.Port, &port)
		l.Endpoints = append(l.Endpoints, prefixtrace.Endpoint{Namespace: md.NamespacedName.Namespace, Name: md.NamespacedName.Name,
			Address: md.Address, Port: port, BlockSize: m.CacheBlockSize, NumGPUBlocks: m.CacheNumBlocks})
		um, ut := upMatchInfo(e)
		l.V150 = append(l.V150, prefixtrace.Score{Match: um, Total: ut, Score: uscores[e]})
	}
	r.write(l)
}
