package datalayer

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"time"
)

// The direct scrape path. At the default 50 ms interval a pool of 100 endpoints is 2,000
// scrapes/s, and with net/http each one costs a round trip through the Transport's per-connection
// read and write goroutines, a Request, a Header map and a timer (about 60 µs of CPU per scrape on
// the 2-core bench machine, more than a whole decision). When Config.HTTPClient is not set, each
// scraper therefore keeps one HTTP/1.1 keep-alive connection of its own and drives it from its
// own goroutine: a precomputed GET, http.ReadResponse (status line, headers, and Content-Length,
// chunked or close-delimited framing exactly as net/http reads them) on a reused bufio.Reader,
// and the connection's deadline for Config.Timeout. What it does not handle it hands to the
// net/http client for good: a 1xx or 3xx answer (vLLM's /metrics answers 307 to /metrics/ in some
// versions) or a Content-Encoding. Status errors, timeouts and dial errors read as the net/http
// client's do ("scrape <url>: Get "<url>": context deadline exceeded", "... connect: connection
// refused", "HTTP status 503").

// errUseHTTPClient tells fetch to make this scrape, and every later one of the scraper, with
// the net/http client.
var errUseHTTPClient = errors.New("direct scrape: hand over to net/http")

// directConn is a scraper's keep-alive connection (used only by the scraper's goroutine).
type directConn struct {
	c    net.Conn
	br   *bufio.Reader
	stop func() bool // unregisters the context.AfterFunc that unblocks c when the scraper stops
}

func (d *directConn) close() {
	d.stop()
	_ = d.c.Close()
}

// directRequest is the request a scraper writes: what net/http sends for the same GET, minus
// "Accept-Encoding: gzip" (the answer is read uncompressed).
func directRequest(hostport, path, accept string) []byte {
	return []byte("GET " + path + " HTTP/1.1\r\nHost: " + hostport + "\r\nUser-Agent: Go-http-client/1.1\r\nAccept: " +
		accept + "\r\n\r\n")
}

// alreadyPast is a deadline that makes blocked reads and writes return at once.
var alreadyPast = time.Unix(1, 0)

// dial opens s's connection. Its dial timeout is c.timeout (capped at net/http's 5 s dial
// timeout of defaultHTTPClient), and ctx ending unblocks any later read or write.
func (c *Collector) dial(ctx context.Context, s *scraper) (*directConn, error) {
	dctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	conn, err := (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext(dctx, "tcp", s.key)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
			err = context.DeadlineExceeded
		}
		return nil, err
	}
	if s.br == nil {
		s.br = bufio.NewReaderSize(conn, 4096)
	} else {
		s.br.Reset(conn)
	}
	d := &directConn{c: conn, br: s.br}
	d.stop = context.AfterFunc(ctx, func() { _ = conn.SetDeadline(alreadyPast) })
	return d, nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// directGet makes one scrape on s's connection (dialling one when there is none) and reads the
// body into s.buf. It returns the HTTP status (0 when none was read) and an error worded as the
// net/http client's; errUseHTTPClient when the answer needs what only net/http does. A reused
// connection that the server closed while idle is replaced once, as net/http retries an
// idempotent request.
func (c *Collector) directGet(ctx context.Context, s *scraper) (int, error) {
	deadline := time.Now().Add(c.timeout)
	for attempt := 0; ; attempt++ {
		fresh := s.conn == nil
		if fresh {
			d, err := c.dial(ctx, s)
			if err != nil {
				return 0, c.urlError(ctx, s, err)
			}
			s.conn = d
		}
		status, retry, err := c.exchange(s, deadline)
		if err == nil || err == errUseHTTPClient {
			return status, err
		}
		s.conn.close()
		s.conn = nil
		if retry && !fresh && attempt == 0 && ctx.Err() == nil {
			continue
		}
		return status, c.urlError(ctx, s, err)
	}
}

// urlError words a transport error as net/http's client does: *url.Error{Op: "Get"}, with a
// deadline hit reported as context.DeadlineExceeded and a stopped scraper as its context's error.
func (c *Collector) urlError(ctx context.Context, s *scraper, err error) error {
	switch {
	case ctx.Err() != nil:
		err = ctx.Err()
	case isTimeout(err):
		err = context.DeadlineExceeded
	}
	return &url.Error{Op: "Get", URL: s.url, Err: err}
}

// exchange writes the request and reads the answer on s.conn. retry reports that nothing of an
// answer arrived (the write failed or the connection ended before the status line), so a new
// connection may try again.
func (c *Collector) exchange(s *scraper, deadline time.Time) (status int, retry bool, err error) {
	d := s.conn
	if err := d.c.SetDeadline(deadline); err != nil {
		return 0, true, err
	}
	if _, err := d.c.Write(s.req); err != nil {
		return 0, true, err
	}
	if _, err := d.br.Peek(1); err != nil {
		return 0, errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed), err
	}
	resp, err := http.ReadResponse(d.br, nil)
	if err != nil {
		return 0, false, err
	}
	keep := !resp.Close
	if resp.StatusCode < 200 || (resp.StatusCode >= 300 && resp.StatusCode < 400) || resp.Header.Get("Content-Encoding") != "" {
		s.conn.close()
		s.conn = nil
		return resp.StatusCode, false, errUseHTTPClient
	}
	if resp.StatusCode != http.StatusOK {
		// Drain a little so the connection can be reused, as fetch does on the net/http path.
		n, _ := io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		if n == 64<<10 || !keep {
			s.conn.close()
			s.conn = nil
		}
		return resp.StatusCode, false, nil
	}
	body := &limitedReader{r: resp.Body, n: MaxBodyBytes}
	s.buf = s.buf[:0]
	for {
		if cap(s.buf)-len(s.buf) < 512 {
			s.buf = slices.Grow(s.buf, max(4096, cap(s.buf)))
		}
		n, rerr := body.Read(s.buf[len(s.buf):cap(s.buf)])
		s.buf = s.buf[:len(s.buf)+n]
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			if body.exceeded {
				return resp.StatusCode, false, errBodyTooLong
			}
			return resp.StatusCode, false, rerr
		}
	}
	if !keep {
		s.conn.close()
		s.conn = nil
	}
	return resp.StatusCode, false, nil
}

// errBodyTooLong marks a body over MaxBodyBytes on the direct path.
var errBodyTooLong = errors.New("metrics body too long")
