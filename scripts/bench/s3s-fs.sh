# s3s-fs for the S3 benchmarks (bench-s3.sh, bench-import.sh --s3); source
# it after scripts/bench/lib.sh.
#
# start_s3s_fs DIR: exports the bench's AWS credentials and region, starts
# s3s-fs on a free loopback port with data under DIR (bucket `bench`
# created), adds it to `pids`, waits for the port; sets `endpoint`
# (http://127.0.0.1:PORT).
start_s3s_fs() {
    need s3s-fs "s3s-fs (cargo install s3s-fs@0.14.1 --features binary; scripts/install-test-deps.sh)"
    export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=benchsecret AWS_REGION=us-east-1
    local port i
    port=$(free_port)
    mkdir -p "$1/bench"
    s3s-fs --host 127.0.0.1 --port "$port" --access-key "$AWS_ACCESS_KEY_ID" \
        --secret-key "$AWS_SECRET_ACCESS_KEY" "$1" >"$work/s3s-fs.log" 2>&1 &
    pids+=($!)
    endpoint=http://127.0.0.1:$port
    # s3s-fs answers an unsigned GET / with 403: wait for the port instead.
    for i in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
        sleep 0.1
    done
    cat "$work/s3s-fs.log" >&2
    die "s3s-fs did not listen on port $port within 10 s"
}
