package vllm

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/eppkit/eppkit/fakes/vllm/engine"
)

// choiceRun is one engine sequence of a request: one prompt of a completions batch, the one
// conversation of a chat-style request, or one embeddings input.
type choiceRun struct {
	prompt promptInput
	// sampleOf is the run's index among the choices of its prompt (request n > 1); usage counts
	// a prompt's tokens once, on its sample 0, as vLLM counts one prompt per request output.
	sampleOf int
	out      []engine.Token // the output tokens to emit (empty for embeddings)
	finish   string
	seq      *engine.Sequence
	// Filled while the sequence runs.
	n      int       // events received
	prevAt time.Time // due time of the latest event
}

// text is the output text of the tokens emitted so far.
func (c *choiceRun) text() string { return joinTokens(c.out[:min(c.n, len(c.out))]) }

// handleAPI serves one generation request of any API: decode, model check, failure injection,
// context-length check, one engine sequence per prompt, then JSON, SSE or embeddings. Every
// refusal is written in the API's own error shape.
func (s *Server) handleAPI(w http.ResponseWriter, r *http.Request, api apiKind) {
	arrival := s.opts.Clock.Now()
	body, apiErr := s.readBody(w, r)
	if apiErr != nil {
		api.writeError(w, apiErr)
		return
	}
	req, apiErr := api.decode(body)
	if apiErr != nil {
		api.writeError(w, apiErr)
		return
	}
	forced := ""
	if v := r.Header.Get(HeaderReturnError); v != "" {
		re, apiErr := ParseReturnError(v)
		switch {
		case apiErr != nil:
			api.writeError(w, apiErr)
			return
		case re.Kind != "":
			forced = re.Kind
		case re.midStream() && req.stream:
			req.failStatus, req.failAfter = re.Status, re.AfterTokens
		default:
			api.writeError(w, simReturnError(re.Status))
			return
		}
	}
	lora, ok := s.resolveModel(req.model)
	if !ok {
		api.writeError(w, NewAPIError(http.StatusNotFound, "model", "The model `%s` does not exist.", req.model))
		return
	}
	if api == apiEmbeddings {
		switch {
		case req.dims == 0:
			req.dims = s.cfg.EmbeddingDim
		case req.dims > s.cfg.EmbeddingDim:
			api.writeError(w, NewAPIError(http.StatusBadRequest, "dimensions", "dimensions %d exceed the model's embedding size %d (--embedding-dim)", req.dims, s.cfg.EmbeddingDim))
			return
		}
	}
	abort, proceed := s.injectFailure(w, r, api, forced)
	if !proceed {
		return
	}
	runs, apiErr := s.planRuns(req)
	if apiErr != nil {
		api.writeError(w, apiErr)
		return
	}

	id := r.Header.Get(HeaderRequestID)
	if id == "" {
		id = strconv.Itoa(s.rank) + "-" + strconv.FormatUint(s.reqSeq.Add(1), 10)
	}
	ctx := r.Context()
	eng := s.pickEngine()
	loraID := s.loraID(lora)
	for i, c := range runs {
		ereq := engine.Request{ID: id, Model: s.cfg.Model, LoRA: lora, Prompt: c.prompt.text, TokenIDs: c.prompt.ids,
			MaxTokens: max(len(c.out), 1), FinishReason: c.finish, CacheSalt: req.cacheSalt, LoRAID: loraID}
		if api == apiEmbeddings {
			ereq.MaxTokens, ereq.PrefillOnly = 0, true
		}
		seq, err := eng.engine.Submit(ctx, ereq)
		if err != nil {
			for _, prev := range runs[:i] {
				prev.seq.Close()
			}
			if e := s.submitError(ctx, err, api); e != nil {
				api.writeError(w, e)
			}
			return
		}
		c.seq = seq
	}
	defer func() {
		for _, c := range runs {
			c.seq.Close()
		}
	}()
	created := arrival.Unix()
	switch {
	case api == apiEmbeddings:
		s.serveEmbeddings(w, ctx, eng, req, runs, id, arrival, abort)
	case req.stream:
		s.serveStream(w, ctx, eng, req, runs, id, created, arrival, abort)
	default:
		s.serveJSON(w, ctx, eng, req, runs, id, created, arrival, abort)
	}
}

// injectFailure rolls the failure injection, or injects kind when it is not empty (an
// X-Return-Error failure kind). proceed is false when the request was answered (an injected
// error in the API's shape, a reset, or the client leaving during a slow first byte); abort asks
// the caller to cut the response midway.
func (s *Server) injectFailure(w http.ResponseWriter, r *http.Request, api apiKind, kind string) (abort, proceed bool) {
	if kind == "" {
		kind = s.pickFailure()
	}
	switch kind {
	case "":
	case FailureReset:
		resetConnection(w)
		return false, false
	case FailureAbort:
		return true, true
	case FailureSlowFirstByte:
		t := s.opts.Clock.NewTimer(s.cfg.SlowFirstByteDelay.D())
		select {
		case <-t.C():
		case <-r.Context().Done():
			t.Stop()
			return false, false
		}
	default:
		api.writeError(w, s.simFailure(kind))
		return false, false
	}
	return false, true
}

// planRuns checks each prompt against the context window (vLLM's and the simulator's 400) and
// chooses its output: the echo, or random bank text of max_tokens tokens (1–3 sentences when
// max_tokens is unset), cut at the context window with finish reason "length".
func (s *Server) planRuns(req *genRequest) ([]*choiceRun, *APIError) {
	n := max(req.n, 1)
	runs := make([]*choiceRun, 0, len(req.prompts)*n)
	if req.toolMode != "" {
		s.rngMu.Lock()
		plan, err := planToolCall(s.rng, req.toolMode, req.toolNamed, req.tools)
		s.rngMu.Unlock()
		if err != nil {
			return nil, NewAPIError(http.StatusBadRequest, "tools", "%v", err)
		}
		req.tool = plan
	}
	maxLen := s.cfg.MaxModelLen
	for i, p := range req.prompts {
		promptTokens := p.numTokens()
		param := req.api.promptParam()
		if req.api == apiEmbeddings {
			if promptTokens > maxLen {
				return nil, NewAPIError(http.StatusBadRequest, param,
					"This model's maximum context length is %d tokens. However, you requested %d tokens in the input for embedding generation. Please reduce the length of the input.",
					maxLen, promptTokens)
			}
			runs = append(runs, &choiceRun{prompt: p, finish: engine.FinishStop})
			continue
		}
		maxTok := req.maxTokens
		if promptTokens+maxTok > maxLen || promptTokens >= maxLen {
			return nil, NewAPIError(http.StatusBadRequest, param,
				"This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the %s, %d in the completion). Please reduce the length of the %s or completion.",
				maxLen, promptTokens+maxTok, promptTokens, param, maxTok, param)
		}
		limit := maxLen - promptTokens
		if maxTok > 0 {
			limit = maxTok
		}
		// n choices per prompt, prompt-major: choice index i*n+j, as vLLM's completions number
		// them (chat has one prompt, so j).
		for j := 0; j < n; j++ {
			var out []engine.Token
			if req.tool != nil {
				out = engine.Tokenize(req.tool.args) // the call's arguments are the output
			} else if s.cfg.Mode == ModeEcho {
				out = req.echo[i]
			} else {
				s.rngMu.Lock()
				out = randomTokens(s.rng, maxTok)
				s.rngMu.Unlock()
			}
			finish := engine.FinishStop
			if len(out) > limit {
				out, finish = out[:limit], engine.FinishLength
			} else if maxTok > 0 && len(out) == maxTok && s.cfg.Mode == ModeRandom && req.tool == nil {
				finish = engine.FinishLength
			}
			runs = append(runs, &choiceRun{prompt: p, sampleOf: j, out: out, finish: finish})
		}
	}
	return runs, nil
}

// submitError maps an engine refusal to the API error to write (nil: the client left).
func (s *Server) submitError(ctx context.Context, err error, api apiKind) *APIError {
	switch {
	case errors.Is(err, engine.ErrQueueFull):
		return NewAPIError(http.StatusTooManyRequests, "", "the waiting queue is full (max-waiting-queue-length %d)", s.cfg.MaxWaitingQueueLength)
	case errors.Is(err, engine.ErrPromptTooLong):
		return NewAPIError(http.StatusBadRequest, api.promptParam(), "%v", err)
	case ctx.Err() != nil:
		return nil
	case errors.Is(err, engine.ErrEngineClosed):
		return NewAPIError(http.StatusServiceUnavailable, "", "the server is shutting down")
	}
	return NewAPIError(http.StatusInternalServerError, "", "engine: %v", err)
}

// record notes one received event of c in the metrics.
func (s *Server) record(eng *rankEngine, c *choiceRun, ev engine.Event) {
	if c.n > 0 {
		eng.met.tokenGap(ev.At.Sub(c.prevAt))
	}
	c.prevAt = ev.At
	c.n++
}

// finishRun records a finished sequence in the metrics.
func (s *Server) finishRun(eng *rankEngine, c *choiceRun, arrival time.Time, pooling bool) {
	eng.met.requestDone(c.finish, c.seq.QueueWait(), c.seq.TTFT(), c.prevAt.Sub(arrival), c.n, pooling)
}

// usageOf sums the usage of every run, with prompt_tokens_details when the server runs with
// --enable-prompt-tokens-details, the request generates and some prompt tokens were cached (as
// vLLM; its embeddings usage has no details).
func (s *Server) usageOf(runs []*choiceRun, pooling bool) Usage {
	var u Usage
	for _, c := range runs {
		if c.sampleOf == 0 { // a prompt counts once however many choices it has
			u.PromptTokens += c.seq.PromptTokens()
			u.cached += c.seq.CachedTokens()
		}
		if !pooling {
			u.CompletionTokens += c.n
		}
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	if s.cfg.EnablePromptTokensDetails && !pooling && u.cached > 0 {
		u.PromptTokensDetails = &PromptTokensDetails{CachedTokens: u.cached}
	}
	return u
}

// drain waits for every event of c (the engine runs all sequences concurrently whoever reads).
func (s *Server) drain(ctx context.Context, eng *rankEngine, c *choiceRun) error {
	for {
		ev, err := c.seq.Next(ctx)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		s.record(eng, c, ev)
		if ev.Final {
			return nil
		}
	}
}

// serveJSON answers a non-streaming request once every sequence has finished.
func (s *Server) serveJSON(w http.ResponseWriter, ctx context.Context, eng *rankEngine, req *genRequest, runs []*choiceRun, id string, created int64, arrival time.Time, abort bool) {
	for _, c := range runs {
		if err := s.drain(ctx, eng, c); err != nil {
			return // client went away or the engine shut down
		}
		s.finishRun(eng, c, arrival, false)
	}
	u := s.usageOf(runs, false)
	var b []byte
	switch req.api {
	case apiMessages:
		b = appendMessagesResponse(nil, id, req.model, runs[0].text(), runs[0].finish, u.PromptTokens, u.CompletionTokens)
	case apiResponses:
		o := responsesObject{id: id, model: req.model, created: created, instructions: req.instructions, maxOutput: req.maxTokens}
		b = o.appendResponse(nil, true, runs[0].text(), runs[0].finish, u)
	default:
		b = appendCompletionResponse(nil, req.api == apiChat, id, req.model, created, runs, u, req.tool)
	}
	writeBody(w, b, abort)
}

// serveEmbeddings answers an embeddings request once every input is prefilled.
func (s *Server) serveEmbeddings(w http.ResponseWriter, ctx context.Context, eng *rankEngine, req *genRequest, runs []*choiceRun, id string, arrival time.Time, abort bool) {
	vectors := make([][]float32, len(runs))
	for i, c := range runs {
		if err := s.drain(ctx, eng, c); err != nil {
			return
		}
		s.finishRun(eng, c, arrival, true)
		vectors[i] = embedding(c.prompt.tokenIDs(), req.dims)
	}
	u := s.usageOf(runs, true)
	writeBody(w, appendEmbeddingsResponse(nil, id, req.model, arrival.Unix(), vectors, req.base64, u.PromptTokens), abort)
}

// writeBody writes a JSON response; with abort it writes half of it and resets the connection.
func writeBody(w http.ResponseWriter, b []byte, abort bool) {
	w.Header().Set("Content-Type", "application/json")
	if abort {
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(b[:len(b)/2])
		http.NewResponseController(w).Flush()
		panic(http.ErrAbortHandler)
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	_, _ = w.Write(b)
}

// streamFormat writes one API's server-sent events into an sseWriter's buffer.
type streamFormat interface {
	// begin writes what goes out before any token (flushed at once when not empty).
	begin(sw *sseWriter)
	// token writes one output token of choice i; first marks that choice's first token, finish
	// is the choice's finish reason when this token is its last ("" before).
	token(sw *sseWriter, i int, text string, first bool, finish string)
	// end writes the closing events: finish holds each choice's finish reason.
	end(sw *sseWriter, finish []string, u Usage)
	// fail writes the API's in-stream error event for e, which ends the stream.
	fail(sw *sseWriter, e *APIError)
}

// errStreamFailed ends a stream that X-Return-Error failed midway.
var errStreamFailed = errors.New("stream failed by " + HeaderReturnError)

func (s *Server) streamFormat(req *genRequest, runs []*choiceRun, id string, created int64) streamFormat {
	switch req.api {
	case apiMessages:
		return &messagesStream{id: id, model: req.model, inputTokens: runs[0].seq.PromptTokens()}
	case apiResponses:
		return &responsesStream{responsesObject: responsesObject{id: id, model: req.model, created: created,
			instructions: req.instructions, maxOutput: req.maxTokens}}
	}
	o := newOpenAIStream(req.api == apiChat, id, req.model, created, req.includeUsage)
	o.finishOnLast = s.cfg.StreamFinish == StreamFinishVLLM
	o.tool = req.tool
	if req.continuousUsage {
		o.promptTokens = make([]int, len(runs))
		o.completionTokens = make([]int, len(runs))
		for i, c := range runs {
			o.promptTokens[i] = c.seq.PromptTokens()
		}
	}
	return o
}

// serveStream streams the tokens of every run as they fall due. Tokens already due when
// written (a consumer that fell behind) go out in one write and one flush; on time, each token is
// flushed alone.
func (s *Server) serveStream(w http.ResponseWriter, ctx context.Context, eng *rankEngine, req *genRequest, runs []*choiceRun, id string, created int64, arrival time.Time, abort bool) {
	clk := s.opts.Clock
	sw := newSSEWriter(w)
	f := s.streamFormat(req, runs, id, created)
	f.begin(sw)
	if len(sw.buf) > 0 {
		if err := sw.flush(); err != nil {
			return
		}
	}
	var pending []time.Time // due times of tokens written but not yet flushed
	emitted := 0
	failStream := func() error {
		f.fail(sw, simReturnError(req.failStatus))
		_ = sw.flush()
		return errStreamFailed
	}
	emit := func(i int, ev engine.Event, buffered bool) error {
		if req.failStatus != 0 && emitted == req.failAfter {
			return failStream()
		}
		emitted++
		c := runs[i]
		s.record(eng, c, ev)
		text := ""
		if ev.Index < len(c.out) {
			text = c.out[ev.Index].Text
		}
		finish := ""
		if ev.Final {
			finish = c.finish
		}
		f.token(sw, i, text, c.n == 1, finish)
		pending = append(pending, ev.At)
		if !buffered || abort {
			if err := sw.flush(); err != nil {
				return err
			}
			for _, at := range pending {
				eng.met.tokenLate(clk.Since(at))
			}
			pending = pending[:0]
		}
		if abort {
			panic(http.ErrAbortHandler)
		}
		return nil
	}
	if len(runs) == 1 {
		c := runs[0]
		for {
			ev, err := c.seq.Next(ctx)
			if err == io.EOF {
				break
			}
			if err != nil {
				return // client went away or the engine shut down
			}
			if err := emit(0, ev, !ev.Final && ev.Buffered > 0); err != nil {
				return
			}
			if ev.Final {
				break
			}
		}
	} else if !s.streamMany(ctx, runs, emit) {
		return
	}
	if req.failStatus != 0 {
		_ = failStream() // the point of failure is at or past the last token
		return
	}
	finish := make([]string, len(runs))
	for i, c := range runs {
		s.finishRun(eng, c, arrival, false)
		finish[i] = c.finish
	}
	f.end(sw, finish, s.usageOf(runs, false))
	_ = sw.flush()
}

// streamMany merges the events of several sequences in arrival order (one reader goroutine per
// sequence); it returns false when a sequence failed or the client left.
func (s *Server) streamMany(ctx context.Context, runs []*choiceRun, emit func(i int, ev engine.Event, buffered bool) error) bool {
	type item struct {
		i   int
		ev  engine.Event
		err error
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := make(chan item, 64)
	for i, c := range runs {
		go func() {
			for {
				ev, err := c.seq.Next(ctx)
				if err == io.EOF {
					return
				}
				select {
				case ch <- item{i, ev, err}:
				case <-ctx.Done():
					return
				}
				if err != nil || ev.Final {
					return
				}
			}
		}()
	}
	for left := len(runs); left > 0; {
		it := <-ch
		if it.err != nil {
			return false
		}
		if it.ev.Final {
			left--
		}
		if err := emit(it.i, it.ev, left > 0 && len(ch) > 0); err != nil {
			return false
		}
	}
	return true
}

func joinTokens(t []engine.Token) string {
	n := 0
	for _, x := range t {
		n += len(x.Text)
	}
	b := make([]byte, 0, n)
	for _, x := range t {
		b = append(b, x.Text...)
	}
	return string(b)
}

// sseWriter collects server-sent events in a buffer that flush writes and flushes; the response
// headers (200, text/event-stream) go out with the first flush.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	buf     []byte
	started bool
}

func newSSEWriter(w http.ResponseWriter) *sseWriter {
	return &sseWriter{w: w, rc: http.NewResponseController(w), buf: make([]byte, 0, 512)}
}

func (s *sseWriter) flush() error {
	if !s.started {
		s.started = true
		h := s.w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		s.w.WriteHeader(http.StatusOK)
	}
	if _, err := s.w.Write(s.buf); err != nil {
		return err
	}
	s.buf = s.buf[:0]
	return s.rc.Flush()
}

// openAIStream writes OpenAI completions and chat chunks with hand-built JSON (a fixed prefix per
// request and the escaped token text): "data: {...}" per token, a role chunk before the first
// chat token, a finish_reason chunk per choice, a usage chunk with stream_options.include_usage,
// then "data: [DONE]". With stream_options.continuous_usage_stats (and include_usage) every
// choice chunk also carries that choice's usage so far, as vLLM's serving_chat.py and
// serving_completion.py write it: prompt tokens, completion tokens generated until then (0 in
// the role chunk), their total.
//
// finishOnLast (Config.StreamFinish vllm) puts a choice's finish_reason, with "stop_reason":null,
// on its last token chunk, as vLLM does; otherwise (openai) a chunk of its own follows the last
// token with an empty delta or text. With a tool call (tool set, chat only) the tokens are the
// call's arguments: the first token chunk carries the call's id, type, name and first argument
// text in delta.tool_calls, later ones only {"index":0,"function":{"arguments":...}}, and the
// finish reason is "tool_calls" (vLLM serving_chat.py, named tool_choice streaming).
type openAIStream struct {
	chat, includeUsage bool
	finishOnLast       bool
	tool               *toolPlan
	prefix             []byte // `data: {"id":..,"object":..,"created":..,"model":..,"choices":[`
	// promptTokens and completionTokens are per choice, set only with continuous usage.
	promptTokens, completionTokens []int
}

// closeChunk ends a choice chunk whose choice object is written: `]`, the choice's usage so far
// with continuous usage, `}` and the event's blank line.
func (o *openAIStream) closeChunk(sw *sseWriter, i int) {
	sw.buf = append(sw.buf, ']')
	if o.promptTokens != nil {
		p, c := o.promptTokens[i], o.completionTokens[i]
		sw.buf = append(sw.buf, `,"usage":{"prompt_tokens":`...)
		sw.buf = strconv.AppendInt(sw.buf, int64(p), 10)
		sw.buf = append(sw.buf, `,"completion_tokens":`...)
		sw.buf = strconv.AppendInt(sw.buf, int64(c), 10)
		sw.buf = append(sw.buf, `,"total_tokens":`...)
		sw.buf = strconv.AppendInt(sw.buf, int64(p+c), 10)
		sw.buf = append(sw.buf, '}')
	}
	sw.buf = append(sw.buf, "}\n\n"...)
}

func newOpenAIStream(chat bool, id, model string, created int64, includeUsage bool) *openAIStream {
	obj, respID := "text_completion", "cmpl-"+id
	if chat {
		obj, respID = "chat.completion.chunk", "chatcmpl-"+id
	}
	p := []byte(`data: {"id":`)
	p = appendJSONString(p, respID)
	p = append(p, `,"object":"`...)
	p = append(p, obj...)
	p = append(p, `","created":`...)
	p = strconv.AppendInt(p, created, 10)
	p = append(p, `,"model":`...)
	p = appendJSONString(p, model)
	p = append(p, `,"choices":[`...)
	return &openAIStream{chat: chat, includeUsage: includeUsage, prefix: p}
}

func (o *openAIStream) begin(*sseWriter) {}

func (o *openAIStream) choice(sw *sseWriter, i int) {
	sw.buf = append(sw.buf, o.prefix...)
	sw.buf = append(sw.buf, `{"index":`...)
	sw.buf = strconv.AppendInt(sw.buf, int64(i), 10)
}

func (o *openAIStream) token(sw *sseWriter, i int, text string, first bool, finish string) {
	if o.chat && first {
		o.choice(sw, i)
		sw.buf = append(sw.buf, `,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}`...)
		o.closeChunk(sw, i)
	}
	if o.completionTokens != nil {
		o.completionTokens[i]++
	}
	o.choice(sw, i)
	switch {
	case o.chat && o.tool != nil:
		sw.buf = append(sw.buf, `,"delta":{"tool_calls":[{`...)
		if first {
			sw.buf = append(sw.buf, `"id":`...)
			sw.buf = appendJSONString(sw.buf, o.tool.id)
			sw.buf = append(sw.buf, `,"type":"function","index":0,"function":{"name":`...)
			sw.buf = appendJSONString(sw.buf, o.tool.name)
			sw.buf = append(sw.buf, `,"arguments":`...)
		} else {
			sw.buf = append(sw.buf, `"index":0,"function":{"arguments":`...)
		}
		sw.buf = appendJSONString(sw.buf, text)
		sw.buf = append(sw.buf, `}}]},"logprobs":null`...)
	case o.chat:
		sw.buf = append(sw.buf, `,"delta":{"content":`...)
		sw.buf = appendJSONString(sw.buf, text)
		sw.buf = append(sw.buf, `},"logprobs":null`...)
	default:
		sw.buf = append(sw.buf, `,"text":`...)
		sw.buf = appendJSONString(sw.buf, text)
		sw.buf = append(sw.buf, `,"logprobs":null`...)
	}
	o.appendFinish(sw, finish != "" && o.finishOnLast, finish)
	o.closeChunk(sw, i)
}

// appendFinish closes a choice object: `,"finish_reason":null}` before the end, or the reason
// (tool_calls for a tool call) and vLLM's "stop_reason":null on the finishing chunk.
func (o *openAIStream) appendFinish(sw *sseWriter, finishing bool, reason string) {
	if !finishing {
		sw.buf = append(sw.buf, `,"finish_reason":null}`...)
		return
	}
	if o.tool != nil {
		reason = o.tool.streamFinish()
	}
	sw.buf = append(sw.buf, `,"finish_reason":`...)
	sw.buf = appendJSONString(sw.buf, reason)
	sw.buf = append(sw.buf, `,"stop_reason":null}`...)
}

func (o *openAIStream) end(sw *sseWriter, finish []string, u Usage) {
	if !o.finishOnLast {
		for i, reason := range finish {
			o.choice(sw, i)
			if o.chat {
				sw.buf = append(sw.buf, `,"delta":{},"logprobs":null`...)
			} else {
				sw.buf = append(sw.buf, `,"text":"","logprobs":null`...)
			}
			o.appendFinish(sw, true, reason)
			o.closeChunk(sw, i)
		}
	}
	if o.includeUsage {
		sw.buf = append(sw.buf, o.prefix...)
		sw.buf = append(sw.buf, `],"usage":`...)
		sw.buf = appendUsage(sw.buf, u, true)
		sw.buf = append(sw.buf, "}\n\n"...)
	}
	sw.buf = append(sw.buf, "data: [DONE]\n\n"...)
}

// appendUsage appends the OpenAI usage object, with prompt_tokens_details when u has them.
// Without them a non-streamed response (stream false) writes `"prompt_tokens_details":null` and
// a streamed usage chunk leaves the key out, as vLLM's API server does (model_dump() of the
// response object versus model_dump_json(exclude_unset=True, exclude_none=True) of the chunk).
func appendUsage(b []byte, u Usage, stream bool) []byte {
	b = append(b, `{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(u.PromptTokens), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(u.CompletionTokens), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(u.TotalTokens), 10)
	if u.PromptTokensDetails == nil {
		if stream {
			return append(b, '}')
		}
		return append(b, `,"prompt_tokens_details":null}`...)
	}
	b = append(b, `,"prompt_tokens_details":{"cached_tokens":`...)
	b = strconv.AppendInt(b, int64(u.PromptTokensDetails.CachedTokens), 10)
	return append(b, "}}"...)
}

// appendCompletionResponse appends a non-streaming completions or chat completions response:
// one choice per run, in order.
// A tool call (tool, chat only) is the message {"role":"assistant","content":"" (null for
// tool_choice auto),"tool_calls":[{"id","type":"function","function":{"name","arguments"}}]},
// with toolPlan.jsonFinish's finish reason (vLLM chat_completion_full_generator).
func appendCompletionResponse(b []byte, chat bool, id, model string, created int64, runs []*choiceRun, u Usage, tool *toolPlan) []byte {
	b = append(b, `{"id":`...)
	if chat {
		b = appendJSONString(b, "chatcmpl-"+id)
		b = append(b, `,"object":"chat.completion"`...)
	} else {
		b = appendJSONString(b, "cmpl-"+id)
		b = append(b, `,"object":"text_completion"`...)
	}
	b = append(b, `,"created":`...)
	b = strconv.AppendInt(b, created, 10)
	b = append(b, `,"model":`...)
	b = appendJSONString(b, model)
	b = append(b, `,"choices":[`...)
	for i, c := range runs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"index":`...)
		b = strconv.AppendInt(b, int64(i), 10)
		finish := c.finish
		switch {
		case chat && tool != nil:
			content := `""`
			if tool.mode == toolChoiceAuto {
				content = "null"
			}
			b = append(b, `,"message":{"role":"assistant","content":`...)
			b = append(b, content...)
			b = append(b, `,"tool_calls":[{"id":`...)
			b = appendJSONString(b, tool.id)
			b = append(b, `,"type":"function","function":{"name":`...)
			b = appendJSONString(b, tool.name)
			b = append(b, `,"arguments":`...)
			b = appendJSONString(b, c.text())
			b = append(b, `}}]}`...)
			finish = tool.jsonFinish(c.finish)
		case chat:
			b = append(b, `,"message":{"role":"assistant","content":`...)
			b = appendJSONString(b, c.text())
			b = append(b, '}')
		default:
			b = append(b, `,"text":`...)
			b = appendJSONString(b, c.text())
		}
		b = append(b, `,"finish_reason":`...)
		b = appendJSONString(b, finish)
		b = append(b, '}')
	}
	b = append(b, `],"usage":`...)
	b = appendUsage(b, u, false)
	return append(b, '}')
}

// fail ends an OpenAI stream as vLLM ends one whose generator raised (serving_chat.py and
// serving_completion.py: create_streaming_error_response, then [DONE]): the error object of
// the JSON error response as one data event.
func (o *openAIStream) fail(sw *sseWriter, e *APIError) {
	sw.buf = append(sw.buf, "data: "...)
	b, _ := json.Marshal(struct {
		Error *APIError `json:"error"`
	}{e})
	sw.buf = append(sw.buf, b...)
	sw.buf = append(sw.buf, "\n\ndata: [DONE]\n\n"...)
}
