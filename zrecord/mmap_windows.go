package zrecord

// The store's mappings reach past a file's end, so that a mapping serves
// while the file grows until the next doubling (see mmap.go). Windows
// cannot do that: a read-only CreateFileMapping may not be larger than the
// file, and while any view of a file is mapped the file cannot be truncated
// (SetEndOfFile fails with ERROR_USER_MAPPED_FILE), which recovery after a
// crash and compaction both need. So on Windows no file is mapped and every
// read is a positional ReadFile (File.ReadAt), the path the store already
// takes for files without a descriptor. The bytes read are the same.

// mapSpan maps nothing on Windows: it returns a nil slice and no error, and
// the caller reads with ReadAt.
func mapSpan(File, int) ([]byte, error) { return nil, nil }

// unmapSpan releases a mapping made by mapSpan: there is none on Windows.
func unmapSpan([]byte) error { return nil }

// adviseRandom, adviseSequential and adviseWillNeed have nothing to advise on Windows, where
// nothing is mapped.
func adviseRandom([]byte)     {}
func adviseSequential([]byte) {}
func adviseWillNeed([]byte)   {}
