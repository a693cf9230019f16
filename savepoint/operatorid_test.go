package savepoint

import "testing"

func TestOperatorIDFromUID(t *testing.T) {
	// uids of the fixture jobs and the ids Flink recorded for them.
	cases := map[string]string{
		"CheckpointingKeyedStateFlatMap1":      "d5c8b168c6cbfe8c507a10f88b325243",
		"CheckpointingKeyedStateFlatMap2":      "dab25811652d3d4983a30c6e4afacb1c",
		"CheckpointingSource1":                 "69f32d314b97c6f7f9ed7873983167f2",
		"CheckpointingSource2":                 "1f2b5df5a66154aca61fcb26193792be",
		"CheckpointingTimelyStatefulOperator1": "4b818c7923a927796d24b727201ba34d",
		"CheckpointingTimelyStatefulOperator2": "41e91aae0bee218c44306cf7d21940ad",
		"window":                               "01203aa9a12dc1ec725e03853dd7c8f2",
		"first":                                "adf090656b210b1609ad3203d4ee7329",
		"second":                               "6730ef7375fb60f9d9bbdfdfd174d803",
	}
	for uid, want := range cases {
		if got := OperatorIDFromUID(uid).String(); got != want {
			t.Errorf("%q: %s, want %s", uid, got, want)
		}
	}
}

// TestOperatorIDsInFixtures checks that ids computed from uids appear in the
// fixtures' metadata (so the hash is the one Flink used for these files).
func TestOperatorIDsInFixtures(t *testing.T) {
	md, err := ParseMetadata(readFixtureMetadata(t, "flink1.20-rocksdb-canonical-valuestate-timers"), "x")
	if err != nil {
		t.Fatal(err)
	}
	ids := map[OperatorID]bool{}
	for _, op := range md.Operators {
		ids[op.ID] = true
	}
	for _, uid := range []string{"CheckpointingSource1", "CheckpointingKeyedStateFlatMap2", "CheckpointingTimelyStatefulOperator1"} {
		if !ids[OperatorIDFromUID(uid)] {
			t.Errorf("uid %s: id %s not in metadata", uid, OperatorIDFromUID(uid))
		}
	}
}

func TestMurmurTailLengths(t *testing.T) {
	// Every tail length 0..31 must give distinct ids and be deterministic.
	seen := map[OperatorID]int{}
	s := "abcdefghijklmnopqrstuvwxyz012345"
	for n := 0; n <= len(s); n++ {
		id := OperatorIDFromUID(s[:n])
		if id != OperatorIDFromUID(s[:n]) {
			t.Fatal("not deterministic")
		}
		if m, ok := seen[id]; ok {
			t.Fatalf("lengths %d and %d collide", m, n)
		}
		seen[id] = n
	}
	// Known vector: Guava murmur3_128(0) of "" is all zero.
	if OperatorIDFromUID("").String() != "00000000000000000000000000000000" {
		t.Fatal("empty input")
	}
}
