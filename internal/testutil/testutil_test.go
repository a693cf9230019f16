package testutil

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sfstate/sfstate/s3"
)

func TestFindBinaryMissing(t *testing.T) {
	_, err := FindBinary("no-such-service-binary")
	if !errors.Is(err, ErrNoBinary) || !strings.Contains(err.Error(), "make setup") {
		t.Fatalf("missing binary: %v", err)
	}
}

func TestVersitygwAndToxiproxy(t *testing.T) {
	srv := StartVersitygw(t)
	tp := StartToxiproxy(t)
	ctx := context.Background()
	if err := srv.Store.Put(ctx, "hello", bytes.NewReader([]byte("world")), 5); err != nil {
		t.Fatal(err)
	}
	p, err := tp.CreateProxy(ctx, "gw", strings.TrimPrefix(srv.Endpoint, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := net.SplitHostPort(p.Listen); err != nil || !strings.HasPrefix(p.Listen, "127.0.0.1:") {
		t.Fatalf("proxy listen %q", p.Listen)
	}
	if err := p.AddToxic(ctx, Latency("lat", "downstream", 60*time.Millisecond, 0)); err != nil {
		t.Fatal(err)
	}
	toxics, err := p.Toxics(ctx)
	if err != nil || len(toxics) != 1 || toxics[0].Name != "lat" || toxics[0].Type != "latency" {
		t.Fatalf("toxics = %+v, %v", toxics, err)
	}
	if err := p.AddToxic(ctx, Toxic{Name: "bogus", Type: "no-such-toxic"}); err == nil {
		t.Fatal("unknown toxic type accepted")
	}
	via, err := srv.NewStore(ctx, "", srv.Options(p.URL(), s3.S3Options{}))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	rc, err := via.Get(ctx, "hello")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "world" {
		t.Fatalf("through proxy: %q", b)
	}
	if el := time.Since(start); el < 60*time.Millisecond {
		t.Fatalf("latency toxic not applied: %v", el)
	}
	if err := p.RemoveToxic(ctx, "lat"); err != nil {
		t.Fatal(err)
	}
	if toxics, _ := p.Toxics(ctx); len(toxics) != 0 {
		t.Fatalf("toxic not removed: %+v", toxics)
	}
	if err := p.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	srv.Close() // idempotent
}
