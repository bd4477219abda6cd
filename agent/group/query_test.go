package group

import (
	"errors"
	"reflect"
	"testing"

	"github.com/handoffhq/handoff/api"
)

func TestQueryEncodingRoundTrip(t *testing.T) {
	reqs := []QueryRequest{
		{Kind: api.QueryGet, Bound: api.Bound{MinSeq: 42}, Keys: [][]byte{[]byte("k")}},
		{Kind: api.QueryGetMany, Bound: api.Bound{MaxLag: 7, Lagged: true}, Keys: [][]byte{[]byte("a"), []byte("\x00\xff")}, MaxBytes: 1 << 20},
		{Kind: api.QueryScan, Scan: api.ScanOptions{Prefix: []byte("p"), Start: []byte("pq"), Limit: 11}},
	}
	for _, q := range reqs {
		got, err := DecodeQuery(EncodeQuery(nil, q))
		if err != nil || !reflect.DeepEqual(got, q) {
			t.Errorf("DecodeQuery(EncodeQuery(%+v)) = %+v, %v", q, got, err)
		}
	}
	sv := api.Served{Member: "m2", Role: api.RoleStandby, Seq: 99}
	ans := []struct {
		kind api.QueryKind
		a    api.QueryAnswer
	}{
		{api.QueryGetMany, api.QueryAnswer{Served: sv, Values: [][]byte{[]byte("1"), nil, {}}}},
		{api.QueryScan, api.QueryAnswer{Served: sv, Items: []api.KV{{Key: []byte("a"), Value: []byte{}}}}},
	}
	for _, c := range ans {
		got, err := DecodeAnswer(c.kind, EncodeAnswer(nil, c.kind, c.a, ""))
		if err != nil || got.Err != nil || !reflect.DeepEqual(got.QueryAnswer, c.a) {
			t.Errorf("DecodeAnswer(EncodeAnswer(%+v)) = %+v, %v", c.a, got, err)
		}
	}
	got, err := DecodeAnswer(api.QueryGetMany, EncodeAnswer(nil, api.QueryGetMany, api.QueryAnswer{Served: sv}, "too many bytes"))
	if err != nil || !errors.Is(got.Err, api.ErrTooLarge) || got.Served != sv {
		t.Errorf("a too-large answer decodes as %+v, %v", got, err)
	}
	for _, bad := range [][]byte{nil, {9}, {queryVersion, 1, 0, 0, 0, 0, 5}, append(EncodeQuery(nil, reqs[0]), 0)} {
		if _, err := DecodeQuery(bad); err == nil {
			t.Errorf("DecodeQuery(%x) took it", bad)
		}
	}
}
