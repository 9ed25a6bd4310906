package zrecord

import (
	"bytes"
	"errors"
	"sync"
	"testing"
)

func TestGatherRagged(t *testing.T) {
	for _, codec := range []Codec{Raw, Zstd} {
		s, err := Create(t.TempDir(), WithCodec(codec))
		if err != nil {
			t.Fatal(err)
		}
		recs := [][]byte{[]byte("alpha"), {}, bytes.Repeat([]byte("b"), 3000), []byte("c")}
		if _, err := s.Append(recs); err != nil {
			t.Fatal(err)
		}
		idx := []int64{2, 0, 1, 3, 0}
		sizes := make([]int64, len(idx))
		needed, err := s.GatherRagged(idx, sizes, make([]byte, 10))
		if err != nil || needed != 3000+5+0+1+5 {
			t.Fatalf("%v: short dst: needed %d, err %v", codec, needed, err)
		}
		dst := make([]byte, needed)
		if got, err := s.GatherRagged(idx, sizes, dst); err != nil || got != needed {
			t.Fatalf("%v: needed %d, err %v", codec, got, err)
		}
		var want []byte
		for k, i := range idx {
			want = append(want, recs[i]...)
			if sizes[k] != int64(len(recs[i])) {
				t.Errorf("%v: sizes[%d] = %d, want %d", codec, k, sizes[k], len(recs[i]))
			}
		}
		if !bytes.Equal(dst, want) {
			t.Errorf("%v: wrong bytes", codec)
		}
		if _, err := s.GatherRagged([]int64{4}, sizes, dst); !errors.Is(err, ErrIndexOutOfRange) {
			t.Errorf("%v: index 4: err %v", codec, err)
		}
		if _, err := s.GatherRagged(idx, sizes[:2], dst); !errors.Is(err, ErrBufferTooSmall) {
			t.Errorf("%v: short sizes: err %v", codec, err)
		}
		s.Close()
	}
}

// Records are k+1 bytes of value k: whatever a concurrent Delete swaps into
// a slot, a consistent read returns a record whose length matches its bytes.
func TestGatherRaggedConsistentUnderDelete(t *testing.T) {
	s, err := Create(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n = 2000
	recs := make([][]byte, n)
	for k := range recs {
		recs[k] = bytes.Repeat([]byte{byte(k % 200)}, k%200+1)
	}
	if _, err := s.Append(recs); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		idx := make([]int64, 50)
		sizes := make([]int64, 50)
		dst := make([]byte, 50*200)
		for {
			select {
			case <-done:
				return
			default:
			}
			for k := range idx {
				idx[k] = int64(k * 7 % 500)
			}
			needed, err := s.GatherRagged(idx, sizes, dst)
			if err != nil {
				t.Error(err)
				return
			}
			off := int64(0)
			for _, sz := range sizes {
				r := dst[off : off+sz]
				off += sz
				if sz == 0 || int64(r[0])+1 != sz || !bytes.Equal(r, bytes.Repeat(r[:1], int(sz))) {
					t.Errorf("torn record of %d bytes", sz)
					return
				}
			}
			if off != needed {
				t.Errorf("sizes sum to %d, needed %d", off, needed)
				return
			}
		}
	}()
	for k := 0; k < 300; k++ {
		if err := s.Delete([]int64{int64(k % 500)}); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	wg.Wait()
}
