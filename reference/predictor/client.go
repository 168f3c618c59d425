package predictor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

// Defaults of ClientConfig.
const (
	DefaultClientTimeout        = time.Second
	DefaultStatusInterval       = time.Second
	DefaultMaxTrainingBuffer    = 10000
	DefaultMaxTrainingBatchSize = 1000
)

// ClientConfig configures a Client for the upstream sidecar layout: one training server and one
// or more prediction servers (upstream env TRAINING_SERVER_URL and PREDICTION_SERVER_URL, a comma
// list; sidecars/latencypredictorasync/types.go ConfigFromEnv). An eppkit predictor serves both
// roles, so both may name the same URL.
type ClientConfig struct {
	// PredictionURLs are base URLs (http://host:port) of prediction servers, used round-robin;
	// at least one.
	PredictionURLs []string
	// TrainingURL is the training server's base URL; empty means PredictionURLs[0].
	TrainingURL string
	// Timeout bounds each HTTP call; default 1 s (upstream's 10 s is longer than a scheduling
	// cycle can wait).
	Timeout time.Duration
	// StatusInterval is how stale the cached /status may get before Ready triggers a refresh;
	// default 1 s.
	StatusInterval time.Duration
	// MaxTrainingBuffer bounds the entries waiting to be sent; the oldest are dropped beyond it.
	// Default 10000.
	MaxTrainingBuffer int
	// MaxTrainingBatchSize is the most entries per POST /add_training_data_bulk; default 1000.
	MaxTrainingBatchSize int
	// HTTPClient is used for every call; default a new http.Client (Timeout applies per call
	// through the request context).
	HTTPClient *http.Client
	// Clock drives the status cache; default the real clock.
	Clock clock.PassiveClock
}

// ClientConfigFromEnv reads upstream's variables PREDICTION_SERVER_URL (comma list) and
// TRAINING_SERVER_URL, falling back to upstream's defaults http://localhost:8001 and
// http://localhost:8000.
func ClientConfigFromEnv(getenv func(string) string) ClientConfig {
	cfg := ClientConfig{PredictionURLs: []string{"http://localhost:8001"}, TrainingURL: "http://localhost:8000"}
	if v := getenv("PREDICTION_SERVER_URL"); strings.TrimSpace(v) != "" {
		cfg.PredictionURLs = nil
		for _, u := range strings.Split(v, ",") {
			if u = strings.TrimSpace(u); u != "" {
				cfg.PredictionURLs = append(cfg.PredictionURLs, u)
			}
		}
	}
	if v := strings.TrimSpace(getenv("TRAINING_SERVER_URL")); v != "" {
		cfg.TrainingURL = v
	}
	return cfg
}

// Client is a Predictor backed by upstream-compatible predictor servers over HTTP. PredictBulk
// calls POST /predict/bulk/strict; AddTrainingData buffers and sends in the background with POST
// /add_training_data_bulk (at most one send in flight; entries arriving meanwhile go in the next);
// Ready reflects the last GET /status is_ready of the prediction servers, refreshed in the
// background when older than StatusInterval, and turns false at once when a prediction call fails
// to reach a server. Safe for concurrent use.
type Client struct {
	cfg  ClientConfig
	next atomic.Uint64

	mu         sync.Mutex
	buf        []TrainingEntry
	sending    bool
	sendDone   chan struct{}
	dropped    int
	sent       int
	lastSend   error
	ready      bool
	statusAt   time.Time
	refreshing bool
	lastStatus *ServerStatusResponse
}

// NewClient validates cfg (URLs must be absolute http or https URLs; the error names the field)
// and returns a client. It makes no call until used.
func NewClient(cfg ClientConfig) (*Client, error) {
	if len(cfg.PredictionURLs) == 0 {
		return nil, errors.New("predictionURLs: at least one prediction server URL is required")
	}
	urls := make([]string, len(cfg.PredictionURLs))
	for i, u := range cfg.PredictionURLs {
		v, err := checkURL(u)
		if err != nil {
			return nil, fmt.Errorf("predictionURLs[%d]: %w", i, err)
		}
		urls[i] = v
	}
	cfg.PredictionURLs = urls
	if cfg.TrainingURL == "" {
		cfg.TrainingURL = urls[0]
	} else {
		v, err := checkURL(cfg.TrainingURL)
		if err != nil {
			return nil, fmt.Errorf("trainingURL: %w", err)
		}
		cfg.TrainingURL = v
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultClientTimeout
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("timeout: must be > 0, got %v", cfg.Timeout)
	}
	if cfg.StatusInterval == 0 {
		cfg.StatusInterval = DefaultStatusInterval
	}
	if cfg.StatusInterval < 0 {
		return nil, fmt.Errorf("statusInterval: must be > 0, got %v", cfg.StatusInterval)
	}
	if cfg.MaxTrainingBuffer == 0 {
		cfg.MaxTrainingBuffer = DefaultMaxTrainingBuffer
	}
	if cfg.MaxTrainingBuffer < 1 {
		return nil, fmt.Errorf("maxTrainingBuffer: must be ≥ 1, got %d", cfg.MaxTrainingBuffer)
	}
	if cfg.MaxTrainingBatchSize == 0 {
		cfg.MaxTrainingBatchSize = DefaultMaxTrainingBatchSize
	}
	if cfg.MaxTrainingBatchSize < 1 {
		return nil, fmt.Errorf("maxTrainingBatchSize: must be ≥ 1, got %d", cfg.MaxTrainingBatchSize)
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{}
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Client{cfg: cfg}, nil
}

func checkURL(s string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil {
		return "", err
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("want an absolute http(s) URL, got %q", s)
	}
	return strings.TrimRight(u.String(), "/"), nil
}

func (c *Client) predictionURL() string {
	n := c.next.Add(1) - 1
	return c.cfg.PredictionURLs[n%uint64(len(c.cfg.PredictionURLs))]
}

// do sends one request with the per-call timeout and decodes a JSON answer of status want into
// out (when non-nil). A transport error or a 5xx wraps ErrNotReady.
func (c *Client) do(ctx context.Context, method, url string, body any, want int, out any) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("encoding %s body: %w", url, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %s %s: %w", ErrNotReady, method, url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxBodyBytes))
	if err != nil {
		return fmt.Errorf("%w: %s %s: reading answer: %w", ErrNotReady, method, url, err)
	}
	if resp.StatusCode != want {
		msg := strings.TrimSpace(string(data))
		var eb errorBody
		if json.Unmarshal(data, &eb) == nil && eb.Detail != "" {
			msg = eb.Detail
		}
		if len(msg) > 300 {
			msg = msg[:300] + "…"
		}
		err := fmt.Errorf("%s %s: status %d, want %d: %s", method, url, resp.StatusCode, want, msg)
		if resp.StatusCode >= 500 {
			err = fmt.Errorf("%w: %w", ErrNotReady, err)
		}
		return err
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%s %s: decoding answer: %w", method, url, err)
		}
	}
	return nil
}

// PredictBulk posts reqs to /predict/bulk/strict on the next prediction server. It validates the
// requests first (the error names the index and field), and checks that the answer holds one
// prediction per request.
func (c *Client) PredictBulk(ctx context.Context, reqs []PredictionRequest) ([]PredictionResponse, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	if len(reqs) > MaxBulkRequests {
		return nil, fmt.Errorf("requests: at most %d per call, got %d", MaxBulkRequests, len(reqs))
	}
	for i := range reqs {
		if err := reqs[i].Validate(); err != nil {
			return nil, fmt.Errorf("requests[%d].%w", i, err)
		}
	}
	var out BulkPredictionResponse
	err := c.do(ctx, http.MethodPost, c.predictionURL()+"/predict/bulk/strict", BulkPredictionRequest{Requests: reqs}, http.StatusOK, &out)
	if err != nil {
		if errors.Is(err, ErrNotReady) {
			c.mu.Lock()
			c.ready = false
			c.mu.Unlock()
		}
		return nil, err
	}
	if len(out.Predictions) != len(reqs) {
		return nil, fmt.Errorf("predict/bulk/strict: %d predictions for %d requests", len(out.Predictions), len(reqs))
	}
	return out.Predictions, nil
}

// AddTrainingData validates the entries (an invalid one refuses the batch, naming index and
// field), stamps a zero Timestamp with the clock's now, buffers them and starts a background send
// if none is running. It does not wait for
// the network; send errors are kept for TrainingStats.
func (c *Client) AddTrainingData(_ context.Context, entries []TrainingEntry) error {
	for i := range entries {
		if err := entries[i].Validate(); err != nil {
			return fmt.Errorf("entries[%d].%w", i, err)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	start := len(c.buf)
	c.buf = append(c.buf, entries...)
	// Upstream's training server reads "timestamp" as the sample's time; stamp unset ones now.
	for i := start; i < len(c.buf); i++ {
		if c.buf[i].Timestamp.IsZero() {
			c.buf[i].Timestamp = c.cfg.Clock.Now()
		}
	}
	if over := len(c.buf) - c.cfg.MaxTrainingBuffer; over > 0 {
		c.buf = append(c.buf[:0], c.buf[over:]...)
		c.dropped += over
	}
	if !c.sending && len(c.buf) > 0 {
		c.sending = true
		c.sendDone = make(chan struct{})
		go c.sendLoop()
	}
	return nil
}

// sendLoop sends buffered entries until the buffer is empty or a send fails.
func (c *Client) sendLoop() {
	for {
		c.mu.Lock()
		n := min(len(c.buf), c.cfg.MaxTrainingBatchSize)
		if n == 0 {
			c.sending = false
			close(c.sendDone)
			c.mu.Unlock()
			return
		}
		batch := append([]TrainingEntry(nil), c.buf[:n]...)
		c.buf = append(c.buf[:0], c.buf[n:]...)
		c.mu.Unlock()
		err := c.do(context.Background(), http.MethodPost, c.cfg.TrainingURL+"/add_training_data_bulk", BulkTrainingRequest{Entries: batch}, http.StatusAccepted, nil)
		c.mu.Lock()
		c.lastSend = err
		if err != nil {
			// Put the batch back in front for the next AddTrainingData or Flush, within the bound.
			c.buf = append(batch, c.buf...)
			if over := len(c.buf) - c.cfg.MaxTrainingBuffer; over > 0 {
				c.buf = append(c.buf[:0], c.buf[over:]...)
				c.dropped += over
			}
			c.sending = false
			close(c.sendDone)
			c.mu.Unlock()
			return
		}
		c.sent += n
		c.mu.Unlock()
	}
}

// Flush sends every buffered entry now and returns the first send error (nil when the buffer
// was empty or all were accepted with 202).
func (c *Client) Flush(ctx context.Context) error {
	for {
		c.mu.Lock()
		if c.sending {
			ch := c.sendDone
			c.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return ctx.Err()
			}
			c.mu.Lock()
			err := c.lastSend
			empty := len(c.buf) == 0
			c.mu.Unlock()
			if err != nil || empty {
				return err
			}
			continue
		}
		if len(c.buf) == 0 {
			c.mu.Unlock()
			return nil
		}
		c.sending = true
		c.sendDone = make(chan struct{})
		c.mu.Unlock()
		go c.sendLoop()
	}
}

// TrainingStats reports entries sent (accepted with 202), buffered, dropped for overflow, and
// the last send error.
func (c *Client) TrainingStats() (sent, buffered, dropped int, lastErr error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sent, len(c.buf), c.dropped, c.lastSend
}

// Status fetches GET /status from the next prediction server and updates Ready.
func (c *Client) Status(ctx context.Context) (*ServerStatusResponse, error) {
	var st ServerStatusResponse
	err := c.do(ctx, http.MethodGet, c.predictionURL()+"/status", nil, http.StatusOK, &st)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.statusAt = c.cfg.Clock.Now()
	if err != nil {
		c.ready = false
		return nil, err
	}
	c.ready = st.IsReady
	c.lastStatus = &st
	return &st, nil
}

// Ready returns the cached readiness from the last /status (false before the first answer),
// starting a background refresh when it is older than StatusInterval.
func (c *Client) Ready() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.refreshing && (c.statusAt.IsZero() || c.cfg.Clock.Since(c.statusAt) >= c.cfg.StatusInterval) {
		c.refreshing = true
		go func() {
			_, _ = c.Status(context.Background())
			c.mu.Lock()
			c.refreshing = false
			c.mu.Unlock()
		}()
	}
	return c.ready
}

var _ Predictor = (*Client)(nil)
