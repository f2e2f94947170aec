#!/bin/bash
# dynamic-training node bootstrap, rendered by the CloudFormation stack ${AWS::StackName}
# (source: templates/user-data/node.sh; scripts/sync-stack copies it into the stack).
# Mounts the shared EFS file system with TLS at /myEFSvolume, installs dtd and dtctl from the
# release the stack names, writes dtd's configuration and runs `dtd ${DtdRole}` as a systemd service.
# On the master, templates/user-data/master.sh comes first and defines the dt_* hooks.
set -euo pipefail
exec > >(tee -a /var/log/dt-bootstrap.log) 2>&1
echo "dt-bootstrap: role ${DtdRole}, stack ${AWS::StackName}, $(date -u +%FT%TZ)"

hook() {
    if declare -F "dt_$1" >/dev/null; then "dt_$1"; fi
}
# The master's IP: the master's own (dt_master_ip), else the one dtd run published in the shared
# directory (its address for the agents' reports), believed only when root's: through the
# access point a worker writes as uid ${WorkerUid}, so only the master writes there as root.
master_ip() {
    local f=/myEFSvolume/dtd_address
    if declare -F dt_master_ip >/dev/null; then dt_master_ip; return; fi
    [ -f $f ] && [ ! -L $f ] && [ "$(stat -c %u $f)" = 0 ] || return 1
    sed 's/:[0-9]*$//' $f
}
retry() {
    local n
    for n in 1 2 3 4 5 6 7 8; do
        "$@" && return 0
        echo "dt-bootstrap: attempt $n of $* failed; retrying in $((n * 5))s" >&2
        sleep $((n * 5))
    done
    return 1
}
# A failing command ends the bootstrap, and the master says so at once (cfn-signal).
on_error() {
    local code=$?
    trap - ERR
    echo "dt-bootstrap: failed (exit $code) at line $1"
    hook failed
    exit "$code"
}
trap 'on_error $LINENO' ERR

# EFS over TLS (amazon-efs-utils' stunnel), authorized by the instance role; workers mount
# through the stack's access point.
retry dnf install -y amazon-efs-utils
mkdir -p /myEFSvolume
if ! grep -q ' /myEFSvolume ' /etc/fstab; then
    echo "${FileSystemId}:/ /myEFSvolume efs ${MountOptions} 0 0" >>/etc/fstab
fi
# The mount target's DNS name can take a minute to resolve after the stack creates it.
retry mount /myEFSvolume
hook after_mount

# The job's user, dt-job, with the uid and gid the workers' access point gives their files:
# torchrun and the training run as it (job.launcher.user defaults to job.owner), never as root.
# Its home holds what the job caches (torch's); it owns nothing else on this disk.
getent group ${WorkerGid} >/dev/null || groupadd -r -g ${WorkerGid} dt-job
getent passwd ${WorkerUid} >/dev/null ||
    useradd -r -u ${WorkerUid} -g ${WorkerGid} -md /var/lib/dt-job -s /sbin/nologin dt-job

# dtd, dtctl, the default health check, the torchrun helper (and dt_atomic.py, which it imports),
# dtd's unit, the man pages and dtctl's bash completion from the release archive, checked against
# the stack's SHA-256 before use. The unit (templates/systemd/) is sandboxed; widen it with a
# drop-in (systemctl edit dtd).
workdir=$(mktemp -d)
retry curl -fsSL --proto '=https' -o "$workdir/dt.tar.gz" "${DtdReleaseUrl}"
echo "${DtdReleaseSha256}  $workdir/dt.tar.gz" | sha256sum -c -
tar -xzf "$workdir/dt.tar.gz" -C "$workdir"
install -m 0755 "$workdir/dtd" "$workdir/dtctl" "$workdir/gpu_health.py" /usr/local/bin/
install -D -m 0644 "$workdir/dt_torch.py" /usr/local/lib/dt/dt_torch.py
install -D -m 0644 "$workdir/dt_atomic.py" /usr/local/lib/dt/dt_atomic.py
install -D -m 0644 -t /usr/local/share/man/man1 "$workdir"/man/*.1
install -D -m 0644 "$workdir/completions/dtctl.bash" /etc/bash_completion.d/dtctl
sed -e 's/@ROLE@/${DtdRole}/' -e 's/@REGION@/${AWS::Region}/' "$workdir/dtd.service" \
    >/etc/systemd/system/dtd.service
rm -rf "$workdir"

# Root's only (0600): run dtctl on the nodes with sudo.
mkdir -p /etc/dt
(umask 077 && cat >/etc/dt/dtd.yaml.new) <<'DT_CONFIG_END'
${DtdConfig}
DT_CONFIG_END
# TorchrunStrategy=in_place (with a TrainingScript): torchft beside torchrun, for the training on
# a worker and the Lighthouse (torchft_lighthouse, dtd's default) on the master, pinned as
# requirements-torch.txt pins it (torch and NumPy are the environment's own, built together;
# torchft 0.2.0 takes torch 2.7 or newer); and the master's IP, which no stack parameter knows,
# where the config says @MASTER_IP@.
if grep -q @MASTER_IP@ /etc/dt/dtd.yaml.new; then
    retry "$(dirname '${Torchrun}')/python3" -m pip install --no-input --progress-bar off \
        torchft==0.2.0 opentelemetry-api==1.45.2 opentelemetry-sdk==1.45.2 \
        opentelemetry-exporter-otlp-proto-http==1.45.2 opentelemetry-exporter-otlp-proto-common==1.45.2 \
        opentelemetry-exporter-otlp-common==0.66b2 opentelemetry-exporter-http-transport==0.66b2 \
        opentelemetry-proto==1.45.2 opentelemetry-semantic-conventions==0.66b2 \
        googleapis-common-protos==1.76.0 protobuf==7.36.2 requests==2.34.2 \
        certifi==2026.10.19.post1 charset-normalizer==3.5.3 idna==3.20 urllib3==2.8.0
    ip=$(retry master_ip)
    [[ $ip =~ ^[0-9]{1,3}(\.[0-9]{1,3}){3}$ ]]
    sed -i "s/@MASTER_IP@/$ip/" /etc/dt/dtd.yaml.new
fi
/usr/local/bin/dtctl config check /etc/dt/dtd.yaml.new
mv /etc/dt/dtd.yaml.new /etc/dt/dtd.yaml
echo 'DT_CONFIG=/etc/dt/dtd.yaml' >/etc/profile.d/dt.sh

# The instance metadata (IPv4 and IPv6) answers root only (docs/deploy.md, "Instance metadata"):
# the job runs as dt-job and must not use this instance's identity (the role's credentials, the
# signed identity document with which the agent proves its key); dtd runs as root. dtd's unit
# loads the rules before every start ('+': outside its sandbox), so no rules, no dtd; one nft
# transaction that replaces the table, so a restart adds nothing twice. Reject, not drop: a
# refused client fails at once instead of waiting out its timeouts. The stack parameter
# JobInstanceMetadata=true leaves the metadata open to every user.
if [ '${JobInstanceMetadata}' != true ]; then
    command -v nft >/dev/null || retry dnf install -y nftables
    cat >/etc/dt/imds.nft <<'DT_IMDS_END'
table inet dt_imds
delete table inet dt_imds
table inet dt_imds {
 chain out {
  type filter hook output priority 0;
  ip daddr 169.254.169.254 meta skuid != 0 reject
  ip6 daddr fd00:ec2::254 meta skuid != 0 reject
 }
}
DT_IMDS_END
    mkdir -p /etc/systemd/system/dtd.service.d
    printf '[Service]\nExecStartPre=+nft -f /etc/dt/imds.nft\n' >/etc/systemd/system/dtd.service.d/imds.conf
fi

hook before_start
systemctl daemon-reload
systemctl enable --now dtd.service

# Started means up, and not restarted, 15 s later.
sleep 15
systemctl is-active --quiet dtd.service
[ "$(systemctl show --property NRestarts --value dtd.service)" = 0 ]
trap - ERR
hook started
echo "dt-bootstrap: dtd ${DtdRole} started"
