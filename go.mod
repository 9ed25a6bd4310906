module github.com/loaderx/loaderx

go 1.25.0

require (
	github.com/klauspost/compress v1.20.4
	github.com/vmihailenco/msgpack/v5 v5.4.1
	golang.org/x/sys v0.47.0
)

require github.com/vmihailenco/tagparser/v2 v2.0.0 // indirect
