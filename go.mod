module github.com/stacksaga-go/stacksaga

go 1.26.0

require (
	github.com/twmb/franz-go v1.22.3
	github.com/vmihailenco/msgpack/v5 v5.4.1
)

require (
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	github.com/stretchr/testify v1.9.0 // indirect
	github.com/twmb/franz-go/pkg/kmsg v1.15.1 // indirect
	github.com/vmihailenco/tagparser/v2 v2.0.0 // indirect
)
