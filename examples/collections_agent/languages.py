"""Reminder templates in the customer's language: English, Hindi, Tamil, Bengali, Marathi.

Every message is one of these fixed templates with the invoice's facts filled in; nothing
is translated by a machine at run time, and a model never writes the text. The
translations were written for this example: have a native speaker who knows your
customers review them before you send them.

Outside English, amounts are written in rupees with Indian digit grouping (``₹1,20,000.00``)
and dates day first (``10-05-2024``). The English templates are the agent's own
(:func:`examples.collections_agent.tools.render`), word for word.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from typing import Literal

Language = Literal["en", "hi", "ta", "bn", "mr"]
Template = Literal["first_reminder", "second_reminder", "final_reminder", "balance_corrected"]

LANGUAGES: dict[str, str] = {
    "en": "English", "hi": "हिन्दी (Hindi)", "ta": "தமிழ் (Tamil)", "bn": "বাংলা (Bengali)",
    "mr": "मराठी (Marathi)",
}
"""The languages reminders are written in, by ISO 639-1 code."""


class UnsupportedLanguage(LookupError):
    """No reminder templates in this language: a person must write to the customer."""


@dataclass(frozen=True, slots=True)
class Texts:
    """One language's templates: greeting, subject and body line per template, closing."""

    greeting: str
    subjects: dict[str, str]
    lines: dict[str, str]
    closing: str


TEXTS: dict[str, Texts] = {
    "en": Texts(
        greeting="Dear {customer} team,",
        subjects={
            "first_reminder": "Friendly reminder: invoice {invoice} is overdue",
            "second_reminder": "Second reminder: invoice {invoice}",
            "final_reminder": "Final reminder: invoice {invoice}",
            "balance_corrected": "Corrected balance for invoice {invoice}",
        },
        lines={
            "first_reminder": (
                "this is a friendly reminder that invoice {invoice} for {amount} INR was due "
                "on {due}. If you have already paid, thank you, and please ignore this "
                "message. If anything on the invoice looks wrong, just reply and we will look "
                "into it."),
            "second_reminder": (
                "we have not yet received payment of {amount} INR for invoice {invoice}, due "
                "on {due}. We would be grateful for payment in the coming days, or a reply "
                "if there is a problem we can help with."),
            "final_reminder": (
                "invoice {invoice} ({amount} INR, due {due}) is still open. We would "
                "appreciate payment within the next week. If you need a payment plan or "
                "something on the invoice is wrong, please reply and we will work it out with "
                "you."),
            "balance_corrected": (
                "following your note about invoice {invoice}, we have written off "
                "{written_off} INR. The corrected balance is {amount} INR. Thank you for your "
                "patience."),
        },
        closing="Kind regards,\nAccounts receivable",
    ),
    "hi": Texts(
        greeting="आदरणीय {customer} टीम,",
        subjects={
            "first_reminder": "विनम्र अनुस्मारक: इनवॉइस {invoice} का भुगतान बाकी है",
            "second_reminder": "दूसरा अनुस्मारक: इनवॉइस {invoice}",
            "final_reminder": "अंतिम अनुस्मारक: इनवॉइस {invoice}",
            "balance_corrected": "इनवॉइस {invoice} की संशोधित बकाया राशि",
        },
        lines={
            "first_reminder": (
                "यह एक विनम्र अनुस्मारक है कि इनवॉइस {invoice} की {amount} की राशि {due} तक "
                "देय थी। यदि आप भुगतान कर चुके हैं, तो धन्यवाद, कृपया इस संदेश को अनदेखा करें। "
                "यदि इनवॉइस में कुछ गलत लगे, तो कृपया जवाब दें, हम उसे देखेंगे।"),
            "second_reminder": (
                "हमें इनवॉइस {invoice} के लिए {amount} का भुगतान, जो {due} को देय था, अभी तक "
                "प्राप्त नहीं हुआ है। आने वाले दिनों में भुगतान हो सके तो हम आभारी होंगे; कोई "
                "समस्या हो तो कृपया बताएं, हम मदद करेंगे।"),
            "final_reminder": (
                "इनवॉइस {invoice} ({amount}, देय तिथि {due}) अभी भी बकाया है। अगले एक सप्ताह "
                "में भुगतान हो सके तो हम आभारी होंगे। यदि आपको किस्तों में भुगतान की सुविधा "
                "चाहिए या इनवॉइस में कुछ गलत है, तो कृपया जवाब दें, हम आपके साथ मिलकर इसका हल "
                "निकालेंगे।"),
            "balance_corrected": (
                "इनवॉइस {invoice} के बारे में आपके संदेश के बाद हमने {written_off} की राशि "
                "राइट-ऑफ़ कर दी है। संशोधित बकाया राशि {amount} है। आपके धैर्य के लिए "
                "धन्यवाद।"),
        },
        closing="सादर,\nलेखा विभाग",
    ),
    "ta": Texts(
        greeting="அன்புள்ள {customer} குழுவினருக்கு,",
        subjects={
            "first_reminder": "அன்பான நினைவூட்டல்: விலைப்பட்டியல் {invoice} செலுத்த வேண்டிய "
                              "தேதி கடந்துவிட்டது",
            "second_reminder": "இரண்டாவது நினைவூட்டல்: விலைப்பட்டியல் {invoice}",
            "final_reminder": "இறுதி நினைவூட்டல்: விலைப்பட்டியல் {invoice}",
            "balance_corrected": "விலைப்பட்டியல் {invoice}: திருத்தப்பட்ட நிலுவைத் தொகை",
        },
        lines={
            "first_reminder": (
                "விலைப்பட்டியல் {invoice}-இன் {amount} தொகை {due} அன்று செலுத்தப்பட "
                "வேண்டியது என்பதை அன்புடன் நினைவூட்டுகிறோம். நீங்கள் ஏற்கனவே "
                "செலுத்தியிருந்தால், நன்றி; இந்தச் செய்தியைப் பொருட்படுத்த வேண்டாம். "
                "விலைப்பட்டியலில் ஏதேனும் தவறு இருப்பதாகத் தோன்றினால், பதில் அனுப்புங்கள்; "
                "நாங்கள் சரிபார்க்கிறோம்."),
            "second_reminder": (
                "{due} அன்று செலுத்த வேண்டிய விலைப்பட்டியல் {invoice}-இன் {amount} தொகை இன்னும் "
                "எங்களுக்கு வரவில்லை. வரும் நாட்களில் செலுத்தினால் நன்றியுடையவர்களாக "
                "இருப்போம்; ஏதேனும் சிக்கல் இருந்தால் தெரிவியுங்கள், நாங்கள் உதவுகிறோம்."),
            "final_reminder": (
                "விலைப்பட்டியல் {invoice} ({amount}, செலுத்த வேண்டிய தேதி {due}) இன்னும் "
                "நிலுவையில் உள்ளது. அடுத்த ஒரு வாரத்திற்குள் செலுத்தினால் "
                "நன்றியுடையவர்களாக இருப்போம். தவணை முறையில் செலுத்தும் வசதி தேவைப்பட்டால் "
                "அல்லது விலைப்பட்டியலில் தவறு இருந்தால், பதில் அனுப்புங்கள்; உங்களுடன் இணைந்து "
                "தீர்வு காண்போம்."),
            "balance_corrected": (
                "விலைப்பட்டியல் {invoice} குறித்த உங்கள் செய்தியைத் தொடர்ந்து, {written_off} "
                "தொகையைத் தள்ளுபடி செய்துள்ளோம். திருத்தப்பட்ட நிலுவைத் தொகை {amount}. உங்கள் "
                "பொறுமைக்கு நன்றி."),
        },
        closing="அன்புடன்,\nகணக்குப் பிரிவு",
    ),
    "bn": Texts(
        greeting="প্রিয় {customer} টিম,",
        subjects={
            "first_reminder": "সবিনয় অনুস্মারক: ইনভয়েস {invoice}-এর পরিশোধের তারিখ পেরিয়ে "
                              "গেছে",
            "second_reminder": "দ্বিতীয় অনুস্মারক: ইনভয়েস {invoice}",
            "final_reminder": "চূড়ান্ত অনুস্মারক: ইনভয়েস {invoice}",
            "balance_corrected": "ইনভয়েস {invoice}-এর সংশোধিত বকেয়া",
        },
        lines={
            "first_reminder": (
                "সবিনয়ে মনে করিয়ে দিচ্ছি যে ইনভয়েস {invoice}-এর {amount} পরিশোধের শেষ তারিখ "
                "ছিল {due}। আপনি যদি ইতিমধ্যে পরিশোধ করে থাকেন, তবে ধন্যবাদ, অনুগ্রহ করে এই "
                "বার্তাটি উপেক্ষা করুন। ইনভয়েসে কোনো ভুল মনে হলে উত্তর দিন, আমরা বিষয়টি "
                "দেখব।"),
            "second_reminder": (
                "ইনভয়েস {invoice}-এর {amount}, যা {due} তারিখে প্রদেয় ছিল, আমরা এখনও পাইনি। "
                "আগামী কয়েক দিনের মধ্যে পরিশোধ করলে আমরা কৃতজ্ঞ থাকব; কোনো সমস্যা থাকলে "
                "জানান, আমরা সাহায্য করব।"),
            "final_reminder": (
                "ইনভয়েস {invoice} ({amount}, প্রদেয় তারিখ {due}) এখনও বকেয়া রয়েছে। আগামী এক "
                "সপ্তাহের মধ্যে পরিশোধ করলে আমরা কৃতজ্ঞ থাকব। কিস্তিতে পরিশোধের সুবিধা প্রয়োজন "
                "হলে বা ইনভয়েসে কোনো ভুল থাকলে উত্তর দিন, আমরা একসঙ্গে সমাধান করব।"),
            "balance_corrected": (
                "ইনভয়েস {invoice} সম্পর্কে আপনার বার্তার পরে আমরা {written_off} মকুব করেছি। "
                "সংশোধিত বকেয়া {amount}। আপনার ধৈর্যের জন্য ধন্যবাদ।"),
        },
        closing="শুভেচ্ছাসহ,\nহিসাব বিভাগ",
    ),
    "mr": Texts(
        greeting="आदरणीय {customer} टीम,",
        subjects={
            "first_reminder": "नम्र स्मरणपत्र: इनव्हॉइस {invoice} ची देय तारीख उलटून गेली आहे",
            "second_reminder": "दुसरे स्मरणपत्र: इनव्हॉइस {invoice}",
            "final_reminder": "अंतिम स्मरणपत्र: इनव्हॉइस {invoice}",
            "balance_corrected": "इनव्हॉइस {invoice} ची सुधारित थकबाकी",
        },
        lines={
            "first_reminder": (
                "इनव्हॉइस {invoice} ची {amount} इतकी रक्कम {due} रोजी देय होती, याची ही नम्र "
                "आठवण. आपण रक्कम आधीच भरली असल्यास धन्यवाद, कृपया या संदेशाकडे दुर्लक्ष करा. "
                "इनव्हॉइसमध्ये काही चूक वाटल्यास कृपया उत्तर द्या, आम्ही ते तपासू."),
            "second_reminder": (
                "इनव्हॉइस {invoice} साठी {amount} इतकी रक्कम, जी {due} रोजी देय होती, आम्हाला "
                "अद्याप मिळालेली नाही. येत्या काही दिवसांत भरणा झाल्यास आम्ही आभारी राहू; काही "
                "अडचण असल्यास कृपया कळवा, आम्ही मदत करू."),
            "final_reminder": (
                "इनव्हॉइस {invoice} ({amount}, देय तारीख {due}) अजूनही थकीत आहे. पुढील "
                "आठवड्याभरात भरणा झाल्यास आम्ही आभारी राहू. हप्त्यांमध्ये भरण्याची सोय हवी "
                "असल्यास किंवा इनव्हॉइसमध्ये काही चूक असल्यास कृपया उत्तर द्या, आम्ही "
                "आपल्यासोबत मार्ग काढू."),
            "balance_corrected": (
                "इनव्हॉइस {invoice} बाबत आपल्या संदेशानंतर आम्ही {written_off} इतकी रक्कम "
                "राइट-ऑफ केली आहे. सुधारित थकबाकी {amount} आहे. आपल्या संयमाबद्दल धन्यवाद."),
        },
        closing="आपला विश्वासू,\nलेखा विभाग",
    ),
}


def language_of(tag: str | None) -> Language | None:
    """The template language for a language tag as a CRM stores it (``hi``, ``hi-IN``,
    ``ta_IN``, ``mr-Deva-IN``, ``EN``); None when there are no templates in it."""
    if not tag or not isinstance(tag, str):
        return None
    primary = tag.strip().replace("_", "-").split("-")[0].lower()
    if primary in TEXTS:
        return primary  # type: ignore[return-value]
    return None


def format_inr(amount: Decimal) -> str:
    """Rupees with Indian digit grouping: ``₹1,20,000.00``, ``₹12,34,567.50``."""
    sign = "-" if amount < 0 else ""
    whole, _, paise = f"{abs(amount):.2f}".partition(".")
    head, tail = whole[:-3], whole[-3:]
    groups = []
    while len(head) > 2:
        groups.insert(0, head[-2:])
        head = head[:-2]
    if head:
        groups.insert(0, head)
    return f"{sign}₹{','.join([*groups, tail])}.{paise}"


def render(language: str, template: Template, *, customer: str, invoice: str,
           amount: Decimal, due: date, written_off: Decimal = Decimal("0"),
           note: str = "") -> tuple[str, str]:
    """Subject and body of a reminder in ``language``, or :class:`UnsupportedLanguage`."""
    texts = TEXTS.get(language)
    if texts is None:
        raise UnsupportedLanguage(
            f"no reminder templates in {language!r}; languages: {', '.join(TEXTS)}")
    english = language == "en"
    facts = {
        "customer": customer, "invoice": invoice,
        "amount": str(amount) if english else format_inr(amount),
        "due": str(due) if english else due.strftime("%d-%m-%Y"),
        "written_off": str(written_off) if english else format_inr(written_off),
    }
    body = f"{texts.greeting.format(**facts)}\n\n{texts.lines[template].format(**facts)}"
    if note.strip():
        body += f"\n\n{note.strip()}"
    return texts.subjects[template].format(**facts), f"{body}\n\n{texts.closing}"
