package zrecord_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/loaderx/loaderx/zrecord"
)

// A store of fixed-size records: append a batch, gather an arbitrary
// selection into one buffer, delete, compact and reopen.
func Example() {
	root, err := os.MkdirTemp("", "zrecord-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(root)
	dir := filepath.Join(root, "rows")

	s, err := zrecord.Create(dir, zrecord.WithCodec(zrecord.Zstd))
	if err != nil {
		log.Fatal(err)
	}
	rows := [][]byte{[]byte("row-0000"), []byte("row-1111"), []byte("row-2222"), []byte("row-3333")}
	first, err := s.Append(rows)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("first index:", first, "length:", s.Len())

	// Records 3, 0 and 3 again, 8 bytes each, side by side in one buffer.
	batch := make([]byte, 3*8)
	if err := s.Gather([]int64{3, 0, 3}, batch, 8); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s\n", batch)

	// Deleting record 1 moves the last record into its place.
	if err := s.Delete([]int64{1}); err != nil {
		log.Fatal(err)
	}
	if err := s.Compact(); err != nil {
		log.Fatal(err)
	}
	if err := s.Close(); err != nil {
		log.Fatal(err)
	}

	r, err := zrecord.Open(dir, zrecord.WithReadOnly())
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	all := make([]byte, 3*8)
	if err := r.Gather([]int64{0, 1, 2}, all, 8); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s (%v, %d records)\n", all, r.Codec(), r.Len())
	// Output:
	// first index: 0 length: 4
	// row-3333row-0000row-3333
	// row-0000row-3333row-2222 (zstd, 3 records)
}

// Records of different sizes: Sizes gives the layout, GatherPacked fills it.
func ExampleStore_GatherPacked() {
	root, err := os.MkdirTemp("", "zrecord-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(root)
	s, err := zrecord.Create(filepath.Join(root, "tokens"))
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Append([][]byte{[]byte("a"), []byte("bcd"), []byte(""), []byte("efghij")}); err != nil {
		log.Fatal(err)
	}
	idx := []int64{3, 1, 2, 0}
	sizes := make([]int64, len(idx))
	if err := s.Sizes(idx, sizes); err != nil {
		log.Fatal(err)
	}
	offsets := make([]int64, len(idx)+1)
	for k, n := range sizes {
		offsets[k+1] = offsets[k] + n
	}
	dst := make([]byte, offsets[len(idx)])
	if err := s.GatherPacked(idx, dst, offsets); err != nil {
		log.Fatal(err)
	}
	for k := range idx {
		fmt.Printf("%d:%q ", idx[k], dst[offsets[k]:offsets[k+1]])
	}
	fmt.Println()
	// Output:
	// 3:"efghij" 1:"bcd" 2:"" 0:"a"
}

// A dictionary store: train on a sample of the records, then create the
// store with the dictionary.
func ExampleTrainDict() {
	var records [][]byte
	for i := range 200 {
		records = append(records, fmt.Appendf(nil, `{"user":%d,"event":"click","page":"/items/%d","agent":"browser/1.0"}`, i, i%17))
	}
	d, err := zrecord.TrainDict(records, zrecord.TierFast, 4<<10)
	if err != nil {
		log.Fatal(err)
	}
	root, err := os.MkdirTemp("", "zrecord-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(root)
	s, err := zrecord.Create(filepath.Join(root, "events"),
		zrecord.WithCodec(zrecord.ZstdDict), zrecord.WithDict(d), zrecord.WithDictTier(zrecord.TierFast))
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Append(records); err != nil {
		log.Fatal(err)
	}
	st, err := s.Stats()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(st.Codec, st.Length, "records, smaller by a third:", st.LiveBytes < st.LogicalBytes*2/3)
	// Output:
	// zstd_dict 200 records, smaller by a third: true
}
