package testutil

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"time"
)

// Toxiproxy is a running toxiproxy-server with a minimal client for its
// HTTP API (https://github.com/Shopify/toxiproxy#http-api).
type Toxiproxy struct {
	// API is the base URL of the control API, e.g. "http://127.0.0.1:8474".
	API  string
	proc *process
	hc   *http.Client
}

// LaunchToxiproxy starts toxiproxy-server on a free 127.0.0.1 port, logging
// to dir, and waits (at most 15s) until its API answers. Close it after use.
func LaunchToxiproxy(ctx context.Context, dir string) (*Toxiproxy, error) {
	bin, err := FindBinary("toxiproxy-server")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		addr, err := freePort()
		if err != nil {
			return nil, err
		}
		host, port, _ := splitHostPort(addr)
		proc, err := startProcess(filepath.Join(dir, fmt.Sprintf("toxiproxy-%d.log", attempt)), bin,
			[]string{"-host", host, "-port", port}, nil)
		if err != nil {
			return nil, err
		}
		tp := &Toxiproxy{API: "http://" + addr, proc: proc, hc: &http.Client{Timeout: 10 * time.Second}}
		err = proc.waitReady("toxiproxy", 15*time.Second, func() error {
			return tp.call(ctx, "GET", "/version", nil, nil)
		})
		if err == nil {
			return tp, nil
		}
		proc.stop()
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

// StartToxiproxy starts toxiproxy-server for the test and stops it at
// cleanup. It skips when the binary is missing (fails when CI=true).
func StartToxiproxy(t TB) *Toxiproxy {
	t.Helper()
	requireBinary(t, "toxiproxy-server")
	tp, err := LaunchToxiproxy(context.Background(), t.TempDir())
	if err != nil {
		t.Fatalf("start toxiproxy: %v", err)
	}
	t.Cleanup(tp.Close)
	return tp
}

// Close stops the server (all proxies go with it).
func (tp *Toxiproxy) Close() {
	if tp != nil && tp.proc != nil {
		tp.proc.stop()
	}
}

func splitHostPort(addr string) (string, string, error) {
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			return addr[:i], addr[i+1:], nil
		}
	}
	return "", "", fmt.Errorf("bad address %q", addr)
}

// call performs one API request; body and out are JSON (either may be nil).
func (tp *Toxiproxy) call(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, tp.API+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := tp.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("toxiproxy %s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(rb))
	}
	if out != nil {
		return json.Unmarshal(rb, out)
	}
	return nil
}

// Proxy is one TCP proxy: clients connect to Listen, traffic goes to
// Upstream through the proxy's toxics.
type Proxy struct {
	Name     string `json:"name"`
	Listen   string `json:"listen"`
	Upstream string `json:"upstream"`
	Enabled  bool   `json:"enabled"`
	tp       *Toxiproxy
}

// CreateProxy creates a proxy named name from a free 127.0.0.1 port to
// upstream ("host:port").
func (tp *Toxiproxy) CreateProxy(ctx context.Context, name, upstream string) (*Proxy, error) {
	listen, err := freePort()
	if err != nil {
		return nil, err
	}
	p := &Proxy{tp: tp}
	in := map[string]any{"name": name, "listen": listen, "upstream": upstream, "enabled": true}
	if err := tp.call(ctx, "POST", "/proxies", in, p); err != nil {
		return nil, err
	}
	p.tp = tp
	return p, nil
}

// URL returns "http://" + the proxy's listen address.
func (p *Proxy) URL() string { return "http://" + p.Listen }

// Toxic is one fault applied to a proxy's traffic. Stream is "downstream"
// (server to client, the default) or "upstream" (client to server);
// Toxicity is the probability in [0,1] that a new connection gets it (1
// when zero).
type Toxic struct {
	Name       string         `json:"name"`
	Type       string         `json:"type"`
	Stream     string         `json:"stream,omitempty"`
	Toxicity   float64        `json:"toxicity"`
	Attributes map[string]any `json:"attributes"`
}

// Latency delays data by latency ± jitter.
func Latency(name, stream string, latency, jitter time.Duration) Toxic {
	return Toxic{Name: name, Type: "latency", Stream: stream,
		Attributes: map[string]any{"latency": latency.Milliseconds(), "jitter": jitter.Milliseconds()}}
}

// Bandwidth limits throughput to rateKB kilobytes per second.
func Bandwidth(name, stream string, rateKB int64) Toxic {
	return Toxic{Name: name, Type: "bandwidth", Stream: stream, Attributes: map[string]any{"rate": rateKB}}
}

// ResetPeer resets connections (TCP RST) after timeout (0: immediately).
func ResetPeer(name, stream string, timeout time.Duration) Toxic {
	return Toxic{Name: name, Type: "reset_peer", Stream: stream, Attributes: map[string]any{"timeout": timeout.Milliseconds()}}
}

// Timeout stops all data and closes connections after timeout (0: holds
// them open forever, a black hole).
func Timeout(name, stream string, timeout time.Duration) Toxic {
	return Toxic{Name: name, Type: "timeout", Stream: stream, Attributes: map[string]any{"timeout": timeout.Milliseconds()}}
}

// LimitData closes connections after n bytes.
func LimitData(name, stream string, n int64) Toxic {
	return Toxic{Name: name, Type: "limit_data", Stream: stream, Attributes: map[string]any{"bytes": n}}
}

// AddToxic adds t to the proxy; it applies to existing and new connections.
func (p *Proxy) AddToxic(ctx context.Context, t Toxic) error {
	if t.Stream == "" {
		t.Stream = "downstream"
	}
	if t.Toxicity == 0 {
		t.Toxicity = 1
	}
	return p.tp.call(ctx, "POST", "/proxies/"+p.Name+"/toxics", t, nil)
}

// RemoveToxic removes the toxic called name.
func (p *Proxy) RemoveToxic(ctx context.Context, name string) error {
	return p.tp.call(ctx, "DELETE", "/proxies/"+p.Name+"/toxics/"+name, nil, nil)
}

// Toxics lists the proxy's toxics.
func (p *Proxy) Toxics(ctx context.Context) ([]Toxic, error) {
	var out []Toxic
	err := p.tp.call(ctx, "GET", "/proxies/"+p.Name+"/toxics", nil, &out)
	return out, err
}

// SetEnabled enables or disables the proxy (disabled: connections refused
// and existing ones closed).
func (p *Proxy) SetEnabled(ctx context.Context, on bool) error {
	return p.tp.call(ctx, "POST", "/proxies/"+p.Name, map[string]any{"enabled": on}, nil)
}

// Delete removes the proxy.
func (p *Proxy) Delete(ctx context.Context) error {
	return p.tp.call(ctx, "DELETE", "/proxies/"+p.Name, nil, nil)
}
