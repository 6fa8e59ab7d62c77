package app

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// requestLog is the outermost HTTP layer: it decides the client's real
// address (believing X-Forwarded-For/-Proto only from trusted proxies),
// counts and times every request by route class and status, and writes one
// structured line per request. Git operations get a richer line of their own
// from hosting; this one carries no credentials, only the path.
type requestLog struct {
	next     http.Handler
	logger   *slog.Logger
	trusted  []netip.Prefix
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

func newRequestLog(next http.Handler, logger *slog.Logger, reg prometheus.Registerer, trusted []netip.Prefix) http.Handler {
	l := &requestLog{
		next:   next,
		logger: logger.With("component", "http"),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_http_requests_total",
			Help: "HTTP requests by route class, method and status.",
		}, []string{"route", "method", "status"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_http_request_duration_seconds",
			Help:    "HTTP request latency by route class.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14),
		}, []string{"route"}),
	}
	reg.MustRegister(l.requests, l.latency)
	l.trusted = trusted
	return l
}

// routeClass keeps metric cardinality bounded: the first path segment(s),
// never user-controlled names.
func routeClass(path string) string {
	switch {
	case strings.HasPrefix(path, "/scm/"):
		switch {
		case strings.HasSuffix(path, "/info/refs"):
			return "git_info_refs"
		case strings.HasSuffix(path, "/git-upload-pack"):
			return "git_upload_pack"
		case strings.HasSuffix(path, "/git-receive-pack"):
			return "git_receive_pack"
		}
		return "git_other"
	case strings.HasPrefix(path, "/rest/"):
		return "rest"
	case path == "/healthz", path == "/readyz", path == "/metrics":
		return strings.TrimPrefix(path, "/")
	}
	return "web"
}

func (l *requestLog) clientAddr(r *http.Request) (addr string, https bool) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	https = r.TLS != nil
	peer, err := netip.ParseAddr(host)
	if err != nil || !l.isTrusted(peer) {
		return host, https
	}
	// Walk X-Forwarded-For from the right, skipping trusted proxies: the
	// first untrusted address is the client. Anything further left was
	// written by the client and cannot be believed.
	if xff := r.Header.Values("X-Forwarded-For"); len(xff) > 0 {
		parts := strings.Split(strings.Join(xff, ","), ",")
		for i := len(parts) - 1; i >= 0; i-- {
			a, err := netip.ParseAddr(strings.TrimSpace(parts[i]))
			if err != nil {
				break
			}
			host = a.String()
			if !l.isTrusted(a) {
				break
			}
		}
	}
	if proto := r.Header.Get("X-Forwarded-Proto"); proto != "" {
		https = strings.EqualFold(proto, "https")
	}
	return host, https
}

func (l *requestLog) isTrusted(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range l.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func (l *requestLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	addr, https := l.clientAddr(r)
	// Transports read r.RemoteAddr; from here on it is the real client.
	_, port, _ := net.SplitHostPort(r.RemoteAddr)
	r.RemoteAddr = net.JoinHostPort(addr, port)
	if https {
		r.URL.Scheme = "https"
	}
	rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
	defer func() {
		v := recover()
		if v == http.ErrAbortHandler {
			// A response cut on purpose (it failed after it started):
			// count and log it, then let net/http close the connection.
			rec.status = 499
			defer panic(v)
		} else if v != nil {
			l.logger.Error("panic serving request", "path", r.URL.Path, "panic", v)
			if !rec.wrote {
				http.Error(rec, "internal server error", http.StatusInternalServerError)
			}
		}
		route := routeClass(r.URL.Path)
		d := time.Since(start)
		l.requests.WithLabelValues(route, r.Method, strconv.Itoa(rec.status)).Inc()
		l.latency.WithLabelValues(route).Observe(d.Seconds())
		if route == "metrics" || route == "healthz" || route == "readyz" {
			return
		}
		l.logger.Info("request", "method", r.Method, "path", r.URL.Path, "route", route,
			"status", rec.status, "bytes_out", rec.bytes, "remote_addr", addr,
			"duration_ms", d.Milliseconds())
	}()
	l.next.ServeHTTP(rec, r)
}

type statusRecorder struct {
	http.ResponseWriter
	status int
	bytes  int64
	wrote  bool
}

func (s *statusRecorder) WriteHeader(code int) {
	if !s.wrote {
		s.status, s.wrote = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	s.wrote = true
	n, err := s.ResponseWriter.Write(b)
	s.bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach Flush, deadlines and the
// connection (for sendfile) through the recorder.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// ReadFrom keeps net/http's sendfile path reachable through the recorder.
func (s *statusRecorder) ReadFrom(r io.Reader) (int64, error) {
	s.wrote = true
	var n int64
	var err error
	if rf, ok := s.ResponseWriter.(io.ReaderFrom); ok {
		n, err = rf.ReadFrom(r)
	} else {
		n, err = io.Copy(s.ResponseWriter, r)
	}
	s.bytes += n
	return n, err
}

func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *statusRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if h, ok := s.ResponseWriter.(http.Hijacker); ok {
		return h.Hijack()
	}
	return nil, nil, errors.New("hijack not supported")
}
