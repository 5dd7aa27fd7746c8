# Part (h) of scripts/bench-serve.sh: the TLS run. Sourced by it (not run on
# its own); uses its $airlock, $work, $HOST, $pids, $port_of, $pid_of,
# $label_of, $scheme_of, run_wrk, get and row.
#
# tls_start: a test CA and a P-256 server certificate for 127.0.0.1 and
#   localhost (openssl), then a second airlock serving the same data dir over
#   HTTPS (`serve --tls-cert --tls-key`) and a second docker-registry over the
#   same storage with its `http.tls` settings; both registered as the servers
#   airlock_tls and ref_tls.
# tls_measure SMALL_PATH BIG_PATH: wrk GETs (run_wrk, so the same client and
#   settings as every other figure) of the 4 KiB blob (h1) and of the 64 MiB
#   blob (h2), each against airlock over plain HTTP, airlock over TLS and
#   docker-registry over TLS, back to back, so that the TLS/plain ratios
#   compare runs a few seconds apart.
# tls_details, tls_table: the (h) lines of the details and of the table.

tls_start() {
    local tls=$work/tls i
    mkdir -p "$tls"
    (
        cd "$tls"
        openssl ecparam -name prime256v1 -genkey -noout -out ca.key
        openssl req -x509 -new -key ca.key -out ca.crt -days 2 -subj /CN=bench-ca
        openssl ecparam -name prime256v1 -genkey -noout -out server.key
        openssl req -new -key server.key -out server.csr -subj /CN=localhost
        printf 'subjectAltName=IP:%s,DNS:localhost\nextendedKeyUsage=serverAuth\n' "$HOST" >server.ext
        openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt -days 2 -extfile server.ext
    ) >"$work/openssl.log" 2>&1 || {
        cat "$work/openssl.log" >&2
        die "openssl could not make the test certificate"
    }
    local airtls_port airtls_pid reftls_port reftls_pid
    airtls_port=$(free_port)
    note "(h) starting airlock over TLS on $HOST:$airtls_port (same data dir)"
    "$airlock" serve --data "$work/airlock-data" --listen "$HOST:$airtls_port" --log warn \
        --tls-cert "$tls/server.crt" --tls-key "$tls/server.key" >"$work/airlock-tls.log" 2>&1 &
    airtls_pid=$!
    pids+=("$airtls_pid")
    reftls_port=$(free_port)
    sed -e "s/^  addr: .*/  addr: $HOST:$reftls_port\n  tls:\n    certificate: ${tls//\//\\/}\/server.crt\n    key: ${tls//\//\\/}\/server.key/" \
        "$work/registry.yml" >"$work/registry-tls.yml"
    note "(h) starting docker-registry over TLS on $HOST:$reftls_port (same storage)"
    docker-registry serve "$work/registry-tls.yml" >"$work/registry-tls.log" 2>&1 &
    reftls_pid=$!
    pids+=("$reftls_pid")
    for i in $(seq 1 100); do
        curl -sf --cacert "$tls/ca.crt" -o /dev/null "https://$HOST:$airtls_port/v2/" &&
            curl -sf --cacert "$tls/ca.crt" -o /dev/null "https://$HOST:$reftls_port/v2/" && break
        [ "$i" = 100 ] && {
            tail -n 20 "$work/airlock-tls.log" "$work/registry-tls.log" >&2
            die "(h) a TLS server did not answer within 10 s"
        }
        sleep 0.1
    done
    # What a default OpenSSL client (wrk's) negotiates with each server.
    tls_cipher_airlock=$(openssl s_client -connect "$HOST:$airtls_port" -CAfile "$tls/ca.crt" </dev/null 2>/dev/null |
        awk '/^New, / { print $2 " " $NF; exit }' | tr -d ,)
    tls_cipher_ref=$(openssl s_client -connect "$HOST:$reftls_port" -CAfile "$tls/ca.crt" </dev/null 2>/dev/null |
        awk '/^New, / { print $2 " " $NF; exit }' | tr -d ,)
    port_of[airlock_tls]=$airtls_port pid_of[airlock_tls]=$airtls_pid label_of[airlock_tls]="airlock TLS" scheme_of[airlock_tls]=https
    port_of[ref_tls]=$reftls_port pid_of[ref_tls]=$reftls_pid label_of[ref_tls]="docker-reg TLS" scheme_of[ref_tls]=https
}

tls_measure() { # SMALL_PATH BIG_PATH
    rounds h1 "$1" airlock airlock_tls ref_tls
    rounds h2 "$2" airlock airlock_tls ref_tls
}

tls_details() {
    local fig lab s rps p99 tr sc wc errs
    for fig in h1 h2; do
        lab="(h) 4 KiB blob GET"
        [ $fig = h2 ] && lab="(h) 64 MiB blob GET"
        for s in airlock airlock_tls ref_tls; do
            read -r rps p99 tr sc wc errs _ <"$work/res.$fig.$s"
            printf '  %-28s %-16s %12.0f %10.2f %12.1f %7s%% %7s%% %7s\n' "$lab" "${label_of[$s]}" "$rps" "$p99" "$tr" "$sc" "$wc" "$errs"
        done
    done
    echo "  (h) cipher negotiated by a default OpenSSL client: airlock $tls_cipher_airlock, docker-registry $tls_cipher_ref"
}

tls_table() {
    echo
    printf '| %-36s | %15s | %15s | %9s | %-15s |\n' "(h) TLS figure" "airlock TLS" "reference" ratio target
    row "(h) 4 KiB GET req/s / airlock plain" "$(get h1 airlock_tls 1)" "$(get h1 airlock 1)" ge 0.7 "%15.0f"
    row "(h) 64 MiB GET MiB/s / airlock plain" "$(get h2 airlock_tls 3)" "$(get h2 airlock 3)" ge 0.8 "%15.1f"
    row "(h) 4 KiB GET req/s / docker-reg TLS" "$(get h1 airlock_tls 1)" "$(get h1 ref_tls 1)" ge 10 "%15.0f"
    row "(h) 4 KiB p99 ms / docker-reg TLS" "$(get h1 airlock_tls 2)" "$(get h1 ref_tls 2)" none 0 "%15.2f"
    row "(h) 64 MiB MiB/s / docker-reg TLS" "$(get h2 airlock_tls 3)" "$(get h2 ref_tls 3)" ge 1.0 "%15.1f"
    row "(h) 64 MiB CPU ms/MiB / docker-reg TLS" "$(get h2 airlock_tls 8)" "$(get h2 ref_tls 8)" none 0 "%15.3f"
}
