//! What one listing of the workers costs `dtd` itself: `Ec2Observer::list` (the SDK's
//! DescribeInstances paginator, its XML parse, and the conversion to `dtd`'s instances) against
//! a loopback server that answers every page at once with 1,000 instances as moto renders them
//! (about 3.6 KB each; EC2's own carry a little more). AWS's time to answer is not in it: this
//! is the CPU the master spends per listing, which `[profile.release.package.aws-sdk-ec2]`'s
//! `opt-level` decides. `cargo bench --bench listing` prints the figures of BENCHMARKS.md.

#[allow(dead_code)]
#[path = "../tests/integration/support/server.rs"]
mod server;

use std::collections::BTreeMap;
use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use aws_sdk_ec2::config::{BehaviorVersion, Credentials, Region};
use dt::observe::ec2::Ec2Observer;

const PAGE: usize = 1_000;
const SIZES: [usize; 2] = [1_000, 10_000];
const RUNS: usize = 7;

/// How many instances the server has listed so far (a page each answer), and how many it has.
#[derive(Default)]
struct Fleet {
    size: usize,
    served: usize,
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let server = server::Server::<Fleet>::start("listing server", serve);
    let rt = (tokio::runtime::Builder::new_current_thread().enable_all())
        .build()
        .expect("runtime");
    let tags = BTreeMap::from([("dt:cluster".to_string(), "bench".to_string())]);
    let observer = Ec2Observer::new(client(server.port), &tags, PAGE as i32);
    for size in SIZES {
        server.lock().size = size;
        let mut took: Vec<Duration> = (0..RUNS)
            .map(|_| {
                server.lock().served = 0;
                let started = Instant::now();
                let listing = rt.block_on(observer.list()).expect("listing");
                assert_eq!(listing.instances.len(), size);
                started.elapsed()
            })
            .collect();
        took.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        println!(
            "listing {size:>6} instances: {:.1} ms (median of {RUNS}, min {:.1}), {:.1} µs an instance",
            ms(took[RUNS / 2]),
            ms(took[0]),
            ms(took[RUNS / 2]) * 1000.0 / size as f64
        );
    }
}

fn client(port: u16) -> aws_sdk_ec2::Client {
    let conf = aws_sdk_ec2::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("testing", "testing", None, None, "bench"))
        .endpoint_url(format!("http://127.0.0.1:{port}"))
        .build();
    aws_sdk_ec2::Client::from_conf(conf)
}

/// Answers each request with the next page, its `nextToken` while instances remain.
fn serve(conn: TcpStream, fleet: &Mutex<Fleet>) {
    let mut reader = BufReader::new(conn.try_clone().expect("connection"));
    let mut conn = conn;
    while server::read_request(&mut reader).is_some() {
        let (from, to, size) = {
            let mut f = fleet.lock().expect("fleet");
            let from = f.served;
            f.served = (from + PAGE).min(f.size);
            (from, f.served, f.size)
        };
        let body = page(from, to, size);
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/xml;charset=utf-8\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        if conn.write_all(head.as_bytes()).is_err() || conn.write_all(&body).is_err() {
            return;
        }
    }
}

fn page(from: usize, to: usize, size: usize) -> Vec<u8> {
    let mut xml = String::with_capacity((to - from) * 3_700 + 300);
    xml.push_str(
        "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<DescribeInstancesResponse \
         xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15\"><reservationSet>",
    );
    for n in from..to {
        xml.push_str(&instance(n));
    }
    xml.push_str("</reservationSet>");
    if to < size {
        xml.push_str(&format!("<nextToken>page-{to}</nextToken>"));
    }
    xml.push_str("<requestId>bench</requestId></DescribeInstancesResponse>");
    xml.into_bytes()
}

/// One reservation of one instance, as moto renders a `p4d.24xlarge` launched with tags.
fn instance(n: usize) -> String {
    let ip = format!("10.{}.{}.{}", (n >> 16) & 255, (n >> 8) & 255, n & 255);
    let dns = format!("ip-{}.ec2.internal", ip.replace('.', "-"));
    let id = format!("i-{n:017x}");
    format!(
        "<item><reservationId>r-{n:017x}</reservationId><ownerId>123456789012</ownerId><groupSet/><instancesSet><item>\
<architecture>x86_64</architecture><blockDeviceMapping><item><deviceName>/dev/sda1</deviceName><ebs><attachTime>2026-11-27T06:58:57.000Z</attachTime>\
<deleteOnTermination>true</deleteOnTermination><status>attached</status><volumeId>vol-{n:017x}</volumeId></ebs></item></blockDeviceMapping>\
<clientToken>5450697e-1e59-4dd9-ac72-4e8947a1bc23</clientToken><ebsOptimized>false</ebsOptimized><hypervisor>xen</hypervisor>\
<networkInterfaceSet><item><association><ipOwnerId>123456789012</ipOwnerId><publicDnsName>ip-54-214-210-231.ec2.internal</publicDnsName>\
<publicIp>54.214.210.231</publicIp></association><attachment><attachTime>2026-11-27T06:58:57.000Z</attachTime><attachmentId>eni-attach-{n:017x}</attachmentId>\
<deleteOnTermination>false</deleteOnTermination><deviceIndex>0</deviceIndex><status>attached</status><networkCardIndex>0</networkCardIndex></attachment>\
<description>Primary network interface</description><groupSet><item><groupId>sg-afb7ee4411e65e85f</groupId><groupName>default</groupName></item></groupSet>\
<ipv6AddressesSet/><macAddress>02:00:00:ce:e4:63</macAddress><networkInterfaceId>eni-{n:017x}</networkInterfaceId><ownerId>123456789012</ownerId>\
<privateDnsName>{dns}</privateDnsName><privateIpAddress>{ip}</privateIpAddress><privateIpAddressesSet><item><association><ipOwnerId>123456789012</ipOwnerId>\
<publicDnsName>ip-54-214-210-231.ec2.internal</publicDnsName><publicIp>54.214.210.231</publicIp></association><primary>true</primary>\
<privateIpAddress>{ip}</privateIpAddress></item></privateIpAddressesSet><sourceDestCheck>true</sourceDestCheck><status>in-use</status>\
<subnetId>subnet-c6afeb6aaceb824bc</subnetId><vpcId>vpc-1988d684784e1794a</vpcId><interfaceType>interface</interfaceType></item></networkInterfaceSet>\
<rootDeviceName>/dev/sda1</rootDeviceName><rootDeviceType>ebs</rootDeviceType><groupSet/><sourceDestCheck>true</sourceDestCheck><sriovNetSupport>simple</sriovNetSupport>\
<stateReason><code/><message/></stateReason><tagSet><item><key>dt:cluster</key><value>bench</value></item><item><key>elastic</key><value>yes</value></item></tagSet>\
<virtualizationType>hvm</virtualizationType><hibernationOptions/><metadataOptions><state>applied</state><httpTokens>required</httpTokens>\
<httpPutResponseHopLimit>1</httpPutResponseHopLimit><httpEndpoint>enabled</httpEndpoint><httpProtocolIpv6>disabled</httpProtocolIpv6>\
<instanceMetadataTags>disabled</instanceMetadataTags></metadataOptions><instanceId>{id}</instanceId><imageId>ami-12c6146b</imageId>\
<instanceState><code>16</code><name>running</name></instanceState><privateDnsName>{dns}</privateDnsName><dnsName>ec2-54-214-210-231.compute-1.amazonaws.com</dnsName>\
<reason/><amiLaunchIndex>0</amiLaunchIndex><productCodes/><instanceType>p4d.24xlarge</instanceType><launchTime>2026-11-27T06:58:57.000Z</launchTime>\
<placement><groupName/><tenancy>default</tenancy><availabilityZone>us-east-1a</availabilityZone></placement><monitoring><state>disabled</state></monitoring>\
<subnetId>subnet-c6afeb6aaceb824bc</subnetId><vpcId>vpc-1988d684784e1794a</vpcId><privateIpAddress>{ip}</privateIpAddress><ipAddress>54.214.210.231</ipAddress>\
</item></instancesSet></item>"
    )
}
