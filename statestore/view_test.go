package statestore

import (
	"errors"
	"testing"
)

// TestViewIsOnePointInTime: a view's meta and keys stay those of the
// moment it was opened while commits are applied after it.
func TestViewIsOnePointInTime(t *testing.T) {
	s := openMem(t)
	mustApply(t, s, "t", Commit{Seq: 3, Epoch: 1, Puts: []KV{kv("a", "1"), kv("b", "1")}})
	v, err := s.View("t")
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, s, "t", Commit{Seq: 5, Epoch: 1, Puts: []KV{kv("a", "2")}, Deletes: [][]byte{[]byte("b")}})
	if m, ok := v.Meta(); !ok || m.Applied != 3 {
		t.Errorf("view's meta = %+v, %v; want applied 3", m, ok)
	}
	if got, err := v.Get([]byte("a")); err != nil || string(got) != "1" {
		t.Errorf("view's a = %q, %v; want 1", got, err)
	}
	vals, err := v.GetMany([][]byte{[]byte("b"), []byte("zz")}, 0)
	if err != nil || string(vals[0]) != "1" || vals[1] != nil {
		t.Errorf("view's b, zz = %q, %v; want [1 nil]", vals, err)
	}
	if kvs, err := v.Scan(ScanOptions{}); err != nil || len(kvs) != 2 {
		t.Errorf("view's scan = %v, %v; want a and b", kvs, err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	v, err = s.View("t")
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if m, _ := v.Meta(); m.Applied != 5 {
		t.Errorf("a new view's applied = %d, want 5", m.Applied)
	}
	if _, err := v.Get([]byte("b")); !errors.Is(err, ErrNotFound) {
		t.Errorf("a new view's b: %v, want ErrNotFound", err)
	}
	none, err := s.View("other")
	if err != nil {
		t.Fatal(err)
	}
	defer none.Close()
	if _, ok := none.Meta(); ok {
		t.Errorf("a view of a task the store does not hold says it holds it")
	}
}
