package main

import "testing"

func TestSynthTrace(t *testing.T) {
	a, b := synthTrace(100, 5_000, 1.01), synthTrace(100, 5_000, 1.01)
	if len(a.reqs) != 5_000 || len(a.keys) != 100 {
		t.Fatalf("got %d requests for %d keys, want 5000 for 100", len(a.reqs), len(a.keys))
	}
	var first int
	for i, k := range a.reqs {
		if k != b.reqs[i] {
			t.Fatalf("request %d: got key %d and %d from the same arguments", i, k, b.reqs[i])
		}
		if int(k) >= len(a.keys) {
			t.Fatalf("request %d: key %d of %d", i, k, len(a.keys))
		}
		if k == 0 {
			first++
		}
	}
	for k, s := range a.sizes {
		if s != synthValueBytes {
			t.Fatalf("key %d: size %d, want %d", k, s, synthValueBytes)
		}
	}
	// Zipf: the most popular key takes about 1/H(100) ≈ 19% of the requests.
	if first < 500 {
		t.Errorf("key 0 took %d of 5000 requests, want the most (Zipf)", first)
	}
}
