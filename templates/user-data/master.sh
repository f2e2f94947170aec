#!/bin/bash
# dynamic-training master bootstrap, part 1 of 2, rendered by the CloudFormation stack
# ${AWS::StackName} (source: templates/user-data/master.sh). It only defines the master's hooks;
# templates/user-data/node.sh follows it in the master's user data and calls them.

# cfn-signal for the master group's CreationPolicy ("cfn-signal" and "CloudFormation helper
# scripts reference", CloudFormation Template Reference: on Amazon Linux it is /opt/aws/bin,
# from the aws-cfn-bootstrap package).
dt_signal() {
    [ -x /opt/aws/bin/cfn-signal ] || dnf install -y aws-cfn-bootstrap || true
    /opt/aws/bin/cfn-signal --exit-code "$1" --stack '${AWS::StackName}' \
        --resource MasterGroup --region '${AWS::Region}' || true
}
dt_failed() { dt_signal 1; }
dt_started() { dt_signal 0; }

# Workers write through the stack's access point as gid ${WorkerGid}: the shared directory is
# writable by that group but sticky (a worker cannot rename or delete what it does not own, such
# as the host files); the state directories (.dt, root's, 0700, which dtd run insists on) and the
# prepare-data program's directory stay root's. A .dt someone else made first, or that others
# could enter, is moved aside whole, never adopted (chown -R would make theirs root's).
# dtd agent runs that program as root only if its directory is root's and written by no one
# else (docs/shared-directory.md, "What a worker can put there"): a directory someone else made first (a worker,
# before this master booted) is moved aside whole, never adopted, since chown would make what
# they put in it root's.
dt_after_mount() {
    local dir script='${PrepareDataScriptPath}'
    chown 0:${WorkerGid} /myEFSvolume
    chmod 1775 /myEFSvolume
    if [ -e /myEFSvolume/.dt ] && [ "$(stat -c %u:%a /myEFSvolume/.dt)" != 0:700 ]; then
        echo "dt-bootstrap: /myEFSvolume/.dt is not root's 0700: moved aside"
        mv /myEFSvolume/.dt "/myEFSvolume/.dt.untrusted-$RANDOM"
    fi
    install -d -m 700 -o 0 -g 0 /myEFSvolume/.dt
    dir=$(dirname "$script")
    case "$dir" in /myEFSvolume/?*)
        if [ -e "$dir" ] && [ "$(stat -c %u "$dir")" != 0 ]; then
            echo "dt-bootstrap: $dir is not root's: moved to $dir.untrusted-$RANDOM"
            mv "$dir" "$dir.untrusted-$RANDOM"
        fi
        mkdir -p "$dir"
        chmod -R go-w "$dir"
    esac
    if [ -e "$script" ] && [ "$(stat -c %u "$script")" != 0 ]; then
        echo "dt-bootstrap: $script is not root's: moved to $script.untrusted"
        mv -f "$script" "$script.untrusted"
    fi
    dt_job_files
}

# /myEFSvolume/job holds the training script and what it imports: root's, mode 0755, so no
# worker can change or add a file there (Python puts a script's own directory first on its
# path). The job's files (ack, host_worker_log, job.pid, progress) are in /myEFSvolume/job/run,
# its user's: root's for a job started on this master, the workers' uid with a TrainingScript
# (their torchrun runs as that user, as job.owner says). dtd believes them only when that user
# owns them (docs/shared-directory.md, "What dtd believes of it"). A directory of another owner
# is moved aside, never adopted, and each file is created empty (ack: 0), 0644, if it is not
# there, by the directory's owner itself (setpriv, util-linux): root writing in a directory
# the job's user owns would follow a link that user put there (`echo 0 >ack` onto a file of
# root's), so root only makes the directory. A link there is left alone (dtd never follows
# one: it refuses it), so none can fail the boot either.
dt_job_files() {
    local d=/myEFSvolume/job r=/myEFSvolume/job/run o=0
    [ -z '${TrainingScript}' ] || o=${WorkerUid}
    [ "$(stat -c %u $d 2>/dev/null || echo 0)" = 0 ] || mv $d $d.untrusted-$RANDOM
    install -d -m 755 -o 0 -g 0 $d
    [ "$(stat -c %u $r 2>/dev/null || echo $o)" = $o ] || mv $r $r.untrusted-$RANDOM
    install -d -m 755 -o $o -g $o $r
    setpriv --reuid=$o --regid=$o --clear-groups sh -ec \
        'cd "$0"; umask 022; for f in host_worker_log job.pid progress ack; do [ -L $f ] || [ -e $f ] || : >$f; done; [ -L ack ] || [ -s ack ] || echo 0 >ack' $r
}

# A dtd that stays down (its unit fails after its start limit) marks this instance Unhealthy
# (instance id from IMDSv2; AWS CLI v2 ships with Amazon Linux 2023), and the group replaces it.
# The alerts' webhook URL from Secrets Manager (AlertWebhookSecret), in a file only root reads:
# the config names the file, so the secret is in no config, user data or worker.
dt_webhook() {
    local n arn='${AlertWebhookSecret}'
    [ -n "$arn" ] || return 0
    for n in 1 2 3 4 5; do
        (umask 077 && aws secretsmanager get-secret-value --region '${AWS::Region}' \
            --secret-id "$arn" --query SecretString --output text >/etc/dt/webhook.new) && break
        echo "dt-bootstrap: reading the webhook secret failed (attempt $n); retrying"
        sleep $((n * 5))
    done
    [ -s /etc/dt/webhook.new ] || { echo "dt-bootstrap: no webhook URL in $arn"; return 1; }
    mv /etc/dt/webhook.new /etc/dt/webhook
}

# job.launcher.in_place.lighthouse: dtd serves the Lighthouse on this IP (node.sh, master_ip).
dt_master_ip() {
    local t imds=http://169.254.169.254/latest
    t=$(curl -fsS -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 60' $imds/api/token)
    curl -fsS -H "X-aws-ec2-metadata-token: $t" $imds/meta-data/local-ipv4
}

dt_before_start() {
    dt_webhook
    mkdir -p /etc/systemd/system/dtd.service.d
    printf '[Unit]\nOnFailure=dt-replace-master.service\n' \
        >/etc/systemd/system/dtd.service.d/replace-master.conf
    cat >/etc/systemd/system/dt-replace-master.service <<'DT_REPLACE_END'
[Unit]
Description=dynamic-training: have the group replace this master

[Service]
Type=oneshot
Environment=AWS_REGION=${AWS::Region}
ExecStart=/usr/local/sbin/dt-replace-master
DT_REPLACE_END
    cat >/usr/local/sbin/dt-replace-master <<'DT_SCRIPT_END'
#!/bin/bash
set -euo pipefail
imds=http://169.254.169.254/latest
token=$(curl -fsS -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 60' $imds/api/token)
id=$(curl -fsS -H "X-aws-ec2-metadata-token: $token" $imds/meta-data/instance-id)
aws autoscaling set-instance-health --instance-id "$id" --health-status Unhealthy \
    --no-should-respect-grace-period
DT_SCRIPT_END
    chmod 0755 /usr/local/sbin/dt-replace-master
}
