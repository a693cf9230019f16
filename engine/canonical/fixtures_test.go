package canonical

import (
	"context"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
)

// fixtureSavepoints opens every canonical fixture savepoint by name.
func fixtureSavepoints(t testing.TB) map[string]*savepoint.Savepoint {
	t.Helper()
	out := map[string]*savepoint.Savepoint{}
	for _, f := range fixtures.All(t) {
		if strings.Contains(f.Name, "NATIVE") {
			continue
		}
		st, err := s3.NewLocal(f.Dir)
		if err != nil {
			t.Fatal(err)
		}
		sp, err := savepoint.Open(context.Background(), st, "_metadata")
		if err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		out[f.Name] = sp
	}
	return out
}
