// Package s3 is sfstate's storage layer: one small interface, Storage, over
// object keys, implemented for local directories (Local), S3-compatible
// object stores (S3) and memory (Mem, for tests), plus wrappers that add
// retries (Retry), a concurrency limit (Limit) and traffic counters
// (Counted). It knows nothing about Flink formats.
//
// # Keys
//
// Keys are slash-separated and relative to the store's root (a directory or
// s3://bucket/prefix). ValidateKey rejects empty keys, absolute keys, "."
// and ".." segments, empty segments, backslashes and control bytes, so no
// key can leave its root. Every method validates its keys (ErrBadKey).
//
// # Locations
//
// ParseURL and Open accept a snapshot directory or its _metadata file as a
// local path, a file:// URL or an s3://bucket/prefix URL; Open returns a
// store rooted at the snapshot directory (wrapped with Retry, and Limit and
// Counted when asked) and the metadata key.
//
// # Errors
//
// Errors keep their cause and are classified with errors.Is against the
// sentinels: IsNotExist (NoSuchKey, 404, a missing file), IsExist (a lost
// PutIfAbsent race, HTTP 412), IsPermanent (also 403 and other 4xx, bad
// keys, unsatisfiable ranges, integrity failures) and IsTransient
// (timeouts, connection resets, an unexpected EOF in a body, 5xx, 429,
// SlowDown and other throttling codes). Only transient errors are retried.
//
// # Integrity and publishing
//
// Writers record size and CRC-32C of every object (PutHashed, HashingWriter)
// in their manifest; readers verify full reads with VerifyingReader. Uploads
// to S3 also carry x-amz-checksum-crc32c, so the server refuses a body
// damaged in transit. A snapshot is published by writing all data objects
// first and _metadata last with PutIfAbsent (PublishSnapshot,
// CommitMetadata): a reader that finds _metadata finds a complete snapshot.
//
// # S3 configuration
//
// The S3 store uses the standard AWS SDK configuration chain; nothing is
// sfstate-specific except the options below.
//
//   - Credentials: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and optionally
//     AWS_SESSION_TOKEN; or a profile from ~/.aws/credentials and
//     ~/.aws/config selected with AWS_PROFILE (files relocatable with
//     AWS_SHARED_CREDENTIALS_FILE and AWS_CONFIG_FILE), including SSO and
//     assume-role profiles; or web identity / container / EC2 instance
//     roles. S3Options.AccessKey/SecretKey override the chain.
//   - Region: AWS_REGION (or AWS_DEFAULT_REGION, or the profile's region);
//     us-east-1 when none is configured. S3Options.Region overrides.
//   - Endpoint, for S3-compatible servers (MinIO, versitygw, Ceph, R2...):
//     AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL, e.g.
//     http://127.0.0.1:7070. The CLI's --s3-endpoint flag and
//     S3Options.Endpoint override both.
//   - Addressing: with a custom endpoint requests are path-style
//     (http://host/bucket/key), which S3-compatible servers expect; on AWS
//     they are virtual-hosted (https://bucket.s3.region.amazonaws.com/key).
//     S3Options.PathStyle forces either.
//   - TLS: AWS_CA_BUNDLE adds a CA bundle for private endpoints.
//
// Uploads of up to one part (16 MiB by default) are one PutObject; larger
// or unknown-length streams use multipart upload with parts sent in
// parallel (S3Options.Concurrency, default 4 in flight; memory per upload is
// at most (Concurrency+1) x PartSize). A failed or cancelled multipart
// upload is aborted, so it leaves neither an object nor a pending upload.
// PutIfAbsent sends If-None-Match: * (on PutObject and on
// CompleteMultipartUpload), which AWS S3 and versitygw v1.8.0 honour
// atomically; a server that ignores the header would silently overwrite,
// so check a new S3-compatible server with the conformance tests first.
// Copy is a server-side CopyObject and refuses objects above 5 GiB.
//
// The whole package builds without cgo.
package s3
